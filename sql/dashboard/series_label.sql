SELECT model, method, k, load_level, prompt_class, prompt_tokens, max_tokens, host_class, runs
FROM series WHERE series_key = $series_key;
