-- name: image-vs-image
-- params: image_a, image_b, method=NULL, k=NULL, model=NULL
-- Decode tok/s and mean acceptance length on vLLM version $image_a against $image_b, one row
-- per series that ran on both (same model + checkpoint, method, k, workload and host class:
-- only the image differs), i.e. per load (a concurrency, or a request rate: load_level r2.5) x
-- prompt class x k. Each side is the median,
-- over that version's runs in the series, of the per-run point (itself the median over the
-- arm's rounds; rejected cells never count); runs_a / runs_b say how many runs.
-- *_delta_pct = 100 * (b / a - 1): positive means $image_b is faster or accepts more. Series
-- that ran on only one of the two versions are left out. Optional filters (default: all):
-- method (e.g. ngram), k (an integer), model (served name or checkpoint path).
SELECT * EXCLUDE (axis, side_a, side_b, vllm_version)
FROM comparisons
WHERE axis = 'image' AND side_a = $image_a AND side_b = $image_b
  AND ($method IS NULL OR method = $method)
  AND ($k IS NULL OR k = CAST($k AS INTEGER))
  AND ($model IS NULL OR model = $model)
ORDER BY model, method, k, load_mode, concurrency, request_rate, ramp_from_rate, arrival, burstiness, prompt_class, prompt_tokens, max_tokens, host_class, series_key;
