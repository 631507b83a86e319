SELECT * FROM alerts WHERE alert_id = $alert_id;
