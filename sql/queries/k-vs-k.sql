-- name: k-vs-k
-- params: k_a, k_b, image=NULL, method=NULL, model=NULL
-- Speculative depth $k_a against $k_b on the same image: decode tok/s and mean acceptance
-- length, one row per vLLM version x series pair that ran with both k (same model +
-- checkpoint, method, workload and host class; only k differs), i.e. per image x concurrency
-- x prompt class. Each side is the median over its runs of the per-run point (median over
-- rounds; rejected cells never count); runs_a / runs_b say how many runs.
-- *_delta_pct = 100 * (b / a - 1): positive means k = $k_b is faster or accepts more. k is
-- the k that ran (after any k-ladder fallback). Optional filters (default: all): image (a
-- vLLM version, e.g. 0.32.0), method, model.
SELECT * EXCLUDE (axis, side_a, side_b, k, series_key)
FROM comparisons
WHERE axis = 'k' AND side_a = CAST(CAST($k_a AS INTEGER) AS VARCHAR) AND side_b = CAST(CAST($k_b AS INTEGER) AS VARCHAR)
  AND ($image IS NULL OR vllm_version = $image)
  AND ($method IS NULL OR method = $method)
  AND ($model IS NULL OR model = $model)
ORDER BY model, method, vllm_version, load_mode, concurrency, request_rate, ramp_from_rate, arrival,
         burstiness, prompt_class, prompt_tokens, max_tokens, host_class;
