SELECT DISTINCT arm, cell, concurrency, prompt_class, prompt_tokens FROM series_points WHERE run_id = $run_id;
