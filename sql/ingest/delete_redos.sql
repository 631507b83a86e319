DELETE FROM redos WHERE run_id = $run_id;
