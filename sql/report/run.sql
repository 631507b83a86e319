SELECT * FROM runs WHERE run_id = $run_id;
