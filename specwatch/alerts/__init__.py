"""Alerts on decided changes (issue 25): opened from a decided A/B, triaged by people, checked again by
the next decided comparison, and announced through an outbox that survives a target that is down."""
