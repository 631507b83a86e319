SELECT DISTINCT arm, concurrency, prompt_class FROM series_points WHERE run_id = $run_id;
