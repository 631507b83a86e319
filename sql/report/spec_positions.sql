SELECT * FROM spec_positions WHERE run_id = $run_id;
