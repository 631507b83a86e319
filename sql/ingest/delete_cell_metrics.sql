DELETE FROM cell_metrics WHERE run_id = $run_id;
