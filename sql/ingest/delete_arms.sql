DELETE FROM arms WHERE run_id = $run_id;
