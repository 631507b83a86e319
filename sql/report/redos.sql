SELECT * FROM redos WHERE run_id = $run_id ORDER BY seq;
