SELECT * FROM quality_results WHERE run_id = $run_id;
