-- name: k-vs-k
-- params: k_a, k_b, image=NULL, method=NULL, model=NULL
-- Speculative depth $k_a against $k_b on the same image: decode tok/s and mean acceptance
-- length, one row per vLLM version x series pair that ran with both k (same model +
-- checkpoint, method, workload and host class; only k differs), i.e. per image x concurrency
-- x prompt class. Each side is the median over its runs of the per-run point (median over
-- restart blocks; rejected cells never count); runs_a / runs_b say how many runs.
-- *_delta_pct = 100 * (b / a - 1): positive means k = $k_b is faster or accepts more. k is
-- the k that ran (after any k-ladder fallback). Optional filters (default: all): image (a
-- vLLM version, e.g. 0.32.0), method, model.
WITH point AS (
    SELECT
        *,
        CASE WHEN k = CAST($k_a AS INTEGER) THEN 'a' ELSE 'b' END AS side,
        -- the series key without k, plus the image: what the two sides must share
        md5(CAST(to_json([
            model, checkpoint_config_sha256, method, prompt_class,
            CAST(prompt_tokens AS VARCHAR), CAST(max_tokens AS VARCHAR), CAST(concurrency AS VARCHAR),
            sampling, cpu_model, gpu_model, CAST(gpu_count AS VARCHAR),
            CAST(tensor_parallel_size AS VARCHAR), vllm_version
        ]) AS VARCHAR)) AS pair_key
    FROM series_points
    WHERE k IN (CAST($k_a AS INTEGER), CAST($k_b AS INTEGER))
      AND ($image IS NULL OR vllm_version = $image)
      AND ($method IS NULL OR method = $method)
      AND ($model IS NULL OR model = $model)
),
side AS (
    SELECT
        pair_key, side,
        model, method, vllm_version, concurrency, prompt_class, prompt_tokens, max_tokens, host_class,
        count(DISTINCT run_id)          AS runs,
        median(decode_tok_s_median)     AS decode_tok_s,
        median(mean_acceptance_length)  AS mean_acceptance_length
    FROM point
    GROUP BY ALL
)
SELECT
    a.model,
    a.method,
    a.vllm_version,
    a.concurrency,
    a.prompt_class,
    a.prompt_tokens,
    a.max_tokens,
    a.host_class,
    a.runs                                                             AS runs_a,
    b.runs                                                             AS runs_b,
    round(a.decode_tok_s, 2)                                           AS decode_tok_s_a,
    round(b.decode_tok_s, 2)                                           AS decode_tok_s_b,
    round(100 * (b.decode_tok_s / a.decode_tok_s - 1), 2)              AS decode_delta_pct,
    round(a.mean_acceptance_length, 3)                                 AS mean_acceptance_length_a,
    round(b.mean_acceptance_length, 3)                                 AS mean_acceptance_length_b,
    round(100 * (b.mean_acceptance_length / a.mean_acceptance_length - 1), 2) AS acceptance_delta_pct
FROM side a
JOIN side b ON b.pair_key = a.pair_key AND a.side = 'a' AND b.side = 'b'
ORDER BY a.model, a.method, a.vllm_version, a.concurrency, a.prompt_class, a.prompt_tokens, a.max_tokens, a.host_class;
