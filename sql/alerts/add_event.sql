INSERT INTO alert_events (alert_id, state, changed_by, changed_at, note) VALUES ($alert_id, $state, $by, $at, $note);
