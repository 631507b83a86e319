-- What the comparison queries (image-vs-image, k-vs-k) share: one row per side of a comparison.
-- A comparison pairs two sides that agree on everything but one axis:
--   axis 'image': the series (its key leaves the image out); the side is the vLLM version;
--   axis 'k':     the series key without k, plus the image; the side is k.
-- Each side is the median over its runs of the per-run point (itself the median over the
-- arm's rounds; rejected cells never count); runs says how many runs.
CREATE OR REPLACE VIEW comparable_points AS
WITH keyed AS (
    SELECT 'image' AS axis, series_key AS pair_key, vllm_version AS side, *
    FROM series_points
    UNION ALL BY NAME
    SELECT 'k' AS axis,
           md5(CAST(to_json([
               model, checkpoint_config_sha256, method, prompt_class,
               CAST(prompt_tokens AS VARCHAR), CAST(max_tokens AS VARCHAR), load_point,
               sampling, cpu_model, gpu_model, CAST(gpu_count AS VARCHAR),
               CAST(tensor_parallel_size AS VARCHAR), vllm_version
           ]) AS VARCHAR)) AS pair_key,
           CAST(k AS VARCHAR) AS side, *
    FROM series_points
)
SELECT
    axis, pair_key, side, series_key,
    model, method, k, vllm_version, concurrency, load_mode, load_level, request_rate, ramp_from_rate, arrival, burstiness, prompt_class, prompt_tokens,
    max_tokens, host_class,
    count(DISTINCT run_id)          AS runs,
    median(decode_tok_s_median)     AS decode_tok_s,
    median(mean_acceptance_length)  AS mean_acceptance_length
FROM keyed
GROUP BY ALL;
