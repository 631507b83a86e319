SELECT * FROM ranks WHERE run_id = $run_id;
