-- name: image-vs-image
-- params: image_a, image_b, method=NULL, k=NULL, model=NULL
-- Decode tok/s and mean acceptance length on vLLM version $image_a against $image_b, one row
-- per series that ran on both (same model + checkpoint, method, k, workload and host class:
-- only the image differs), i.e. per concurrency x prompt class x k. Each side is the median,
-- over that version's runs in the series, of the per-run point (itself the median over the
-- arm's restart blocks; rejected cells never count); runs_a / runs_b say how many runs.
-- *_delta_pct = 100 * (b / a - 1): positive means $image_b is faster or accepts more. Series
-- that ran on only one of the two versions are left out. Optional filters (default: all):
-- method (e.g. ngram), k (an integer), model (served name or checkpoint path).
WITH point AS (
    SELECT
        *,
        CASE WHEN vllm_version = $image_a THEN 'a' ELSE 'b' END AS side
    FROM series_points
    WHERE vllm_version IN ($image_a, $image_b)
      AND ($method IS NULL OR method = $method)
      AND ($k IS NULL OR k = CAST($k AS INTEGER))
      AND ($model IS NULL OR model = $model)
),
side AS (
    SELECT
        series_key, side,
        model, method, k, concurrency, prompt_class, prompt_tokens, max_tokens, host_class,
        count(DISTINCT run_id)          AS runs,
        median(decode_tok_s_median)     AS decode_tok_s,
        median(mean_acceptance_length)  AS mean_acceptance_length
    FROM point
    GROUP BY ALL
)
SELECT
    a.model,
    a.method,
    a.k,
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
    round(100 * (b.mean_acceptance_length / a.mean_acceptance_length - 1), 2) AS acceptance_delta_pct,
    a.series_key
FROM side a
JOIN side b ON b.series_key = a.series_key AND a.side = 'a' AND b.side = 'b'
ORDER BY a.model, a.method, a.k, a.concurrency, a.prompt_class, a.prompt_tokens, a.max_tokens, a.host_class, a.series_key;
