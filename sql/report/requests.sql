SELECT * FROM requests WHERE run_id = $run_id;
