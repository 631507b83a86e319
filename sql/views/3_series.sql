-- One row per series: how much history it has and its latest point.
CREATE OR REPLACE VIEW series AS
SELECT
    series_key, host_class,
    model, checkpoint_config_sha256, method, k,
    prompt_class, prompt_tokens, max_tokens, concurrency, sampling,
    load_mode, load_level, request_rate, ramp_from_rate, arrival, burstiness, load_point, cell,
    cpu_model, gpu_model, gpu_count, tensor_parallel_size,
    count(DISTINCT run_id)                          AS runs,
    count(*)                                        AS points,
    min(started_at)                                 AS first_at,
    max(started_at)                                 AS last_at,
    arg_max(vllm_version, started_at)               AS last_vllm_version,
    arg_max(decode_tok_s_median, started_at)        AS last_decode_tok_s,
    arg_max(mean_acceptance_length, started_at)     AS last_mean_acceptance_length
FROM series_points
GROUP BY ALL;
