SELECT * FROM arms WHERE run_id = $run_id;
