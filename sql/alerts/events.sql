SELECT state, changed_by, changed_at, note FROM alert_events WHERE alert_id = $alert_id ORDER BY changed_at, state;
