SELECT alert_id, direction, summary FROM alerts WHERE series = $series AND state = 'fixed' ORDER BY alert_id;
