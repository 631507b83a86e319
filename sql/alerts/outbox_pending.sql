SELECT notification_id, alert_id, event, summary, links, attempts FROM outbox WHERE sent_at IS NULL
ORDER BY notification_id;
