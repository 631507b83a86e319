-- name: series
-- params: method=NULL, k=NULL, model=NULL, load_level=NULL
-- Every series in the history: one row per model + checkpoint, method, k, workload
-- (prompt class, prompt/max tokens, load: a concurrency, or a request rate with its arrival law
-- and burstiness, load_level c4 / r2.5 / r1to8 as in the cell id; sampling) and host class, with how many
-- runs it has, when it first and last ran, and its latest vLLM version, decode tok/s and
-- mean acceptance length. Use a series_key (or a prefix) with acceptance-trend --param
-- series=... Optional filters (default: all): method, k, model, load_level (e.g. c4 or r2.5).
SELECT
    model,
    method,
    k,
    concurrency,
    load_level,
    arrival,
    burstiness,
    prompt_class,
    prompt_tokens,
    max_tokens,
    sampling,
    host_class,
    runs,
    first_at,
    last_at,
    last_vllm_version,
    round(last_decode_tok_s, 2)              AS last_decode_tok_s,
    round(last_mean_acceptance_length, 3)    AS last_mean_acceptance_length,
    series_key
FROM series
WHERE ($method IS NULL OR method = $method)
  AND ($k IS NULL OR k = CAST($k AS INTEGER))
  AND ($model IS NULL OR model = $model)
  AND ($load_level IS NULL OR load_level = $load_level)
ORDER BY model, method, k, load_mode, concurrency, request_rate, ramp_from_rate, arrival, burstiness, prompt_class, prompt_tokens, max_tokens, host_class, series_key;
