SELECT alert_id, state, summary FROM alerts WHERE first_run_id = $run_id OR last_run_id = $run_id ORDER BY alert_id;
