SELECT * FROM cells WHERE run_id = $run_id;
