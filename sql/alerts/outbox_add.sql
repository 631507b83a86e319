INSERT INTO outbox (alert_id, event, summary, links, created_at) VALUES ($alert_id, $event, $summary, $links, $at);
