-- History views: every stored cell placed in its series, one point per (run, arm, cell),
-- and the failed regression checks. Views only read the per-cell aggregates written at
-- ingest (cells); nothing here touches the requests table.
--
-- Series key (issue 5, "History and regressions"): model + checkpoint config hash, method,
-- k (the k that ran), workload (prompt class, prompt tokens, max tokens, concurrency,
-- sampling) and host class (CPU model, GPU model, GPU count, tensor-parallel size).
-- The image / vLLM version is NOT in the key: it is what history compares along a series.
-- series_key = md5 of the JSON array of those fields, in this order, all as text:
--   [model, checkpoint_config_sha256, method, k, prompt_class, prompt_tokens, max_tokens,
--    concurrency, sampling, cpu_model, gpu_model, gpu_count, tensor_parallel_size]
-- A missing field is JSON null, so NULL never collides with any value.

-- One row per non-rejected cell (every block), with its series fields.
CREATE VIEW series_cells AS
WITH run_keys AS (
    SELECT
        run_id,
        -- the served model name, else the checkpoint directory; the config hash tells
        -- two checkpoints served under one name apart
        coalesce(
            experiment ->> '$.model.served_name',
            experiment ->> '$.model.path',
            checkpoint_path,
            experiment_name
        )                                            AS model,
        checkpoint_config_sha256,
        -- minified JSON text: whitespace never splits a series
        coalesce(CAST(json(sampling) AS VARCHAR), 'null') AS sampling,
        cpu_model,
        gpu_model,
        coalesce(gpu_count, 0)                       AS gpu_count,
        started_at
    FROM runs
),
arm_keys AS (
    SELECT
        run_id, arm, block, image, vllm_version, method, k,
        -- `--tensor-parallel-size N`, `-tp N`, `--tensor-parallel-size=N` or `-tp=N`; else 1
        coalesce(
            TRY_CAST(nullif(regexp_extract(CAST(launch_argv AS VARCHAR),
                '"(?:--tensor-parallel-size|-tp)"\s*,\s*"(\d+)"', 1), '') AS INTEGER),
            TRY_CAST(nullif(regexp_extract(CAST(launch_argv AS VARCHAR),
                '"(?:--tensor-parallel-size|-tp)=(\d+)"', 1), '') AS INTEGER),
            1
        )                                            AS tensor_parallel_size
    FROM arms
),
keyed AS (
    SELECT
        r.model,
        r.checkpoint_config_sha256,
        a.method,
        a.k,
        c.prompt_class,
        c.prompt_tokens,
        c.max_tokens,
        c.concurrency,
        r.sampling,
        r.cpu_model,
        r.gpu_model,
        r.gpu_count,
        a.tensor_parallel_size,
        a.image,
        a.vllm_version,
        c.run_id,
        c.arm,
        c.block,
        r.started_at,
        c.decode_tok_s_median,
        c.ttft_s_median,
        c.aggregate_tok_s,
        c.mean_acceptance_length,
        c.draft_acceptance_rate
    FROM cells c
    JOIN arm_keys a USING (run_id, arm, block)
    JOIN run_keys r USING (run_id)
    WHERE NOT c.rejected
)
SELECT
    md5(CAST(to_json([
        model, checkpoint_config_sha256, method, CAST(k AS VARCHAR), prompt_class,
        CAST(prompt_tokens AS VARCHAR), CAST(max_tokens AS VARCHAR), CAST(concurrency AS VARCHAR),
        sampling, cpu_model, gpu_model, CAST(gpu_count AS VARCHAR), CAST(tensor_parallel_size AS VARCHAR)
    ]) AS VARCHAR))                                  AS series_key,
    -- display only (series_key is what separates series)
    coalesce(cpu_model, 'unknown CPU')
        || CASE WHEN gpu_count > 0 THEN ' + ' || gpu_count || 'x ' || coalesce(gpu_model, 'unknown GPU') ELSE '' END
        || ' tp' || tensor_parallel_size             AS host_class,
    *
FROM keyed;

-- A run is regression-flagged when any regression check failed, invalid-flagged when any
-- sanity check failed (the baseline policy skips both kinds).
CREATE VIEW run_flags AS
SELECT
    r.run_id,
    r.started_at,
    r.exit_code,
    coalesce(bool_or(q.severity = 'regression' AND NOT q.passed), false) AS regression_flagged,
    coalesce(bool_or(q.severity = 'invalid' AND NOT q.passed), false)    AS invalid_flagged
FROM runs r
LEFT JOIN quality_results q USING (run_id)
GROUP BY r.run_id, r.started_at, r.exit_code;

-- One point per (run, arm, cell) of a series: each metric is the median over the arm's
-- restart blocks (blocks = how many blocks were kept). Named queries read this view.
CREATE VIEW series_points AS
SELECT
    s.series_key, s.host_class,
    s.model, s.checkpoint_config_sha256, s.method, s.k,
    s.prompt_class, s.prompt_tokens, s.max_tokens, s.concurrency, s.sampling,
    s.cpu_model, s.gpu_model, s.gpu_count, s.tensor_parallel_size,
    s.image, s.vllm_version, s.run_id, s.arm, s.started_at,
    f.regression_flagged,
    count(*)                           AS blocks,
    median(s.decode_tok_s_median)      AS decode_tok_s_median,
    median(s.ttft_s_median)            AS ttft_s_median,
    median(s.aggregate_tok_s)          AS aggregate_tok_s,
    median(s.mean_acceptance_length)   AS mean_acceptance_length,
    median(s.draft_acceptance_rate)    AS draft_acceptance_rate
FROM series_cells s
JOIN run_flags f USING (run_id)
GROUP BY ALL;

-- One row per series: how much history it has and its latest point.
CREATE VIEW series AS
SELECT
    series_key, host_class,
    model, checkpoint_config_sha256, method, k,
    prompt_class, prompt_tokens, max_tokens, concurrency, sampling,
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

-- Failed regression checks. delta_pct is in percent: 100 * (value / baseline_value - 1).
-- block is NULL for a check over all blocks; image/vllm_version/method are the arm's.
CREATE VIEW regressions AS
WITH arm_info AS (
    SELECT run_id, arm,
           any_value(image) AS image, any_value(vllm_version) AS vllm_version,
           any_value(method) AS method
    FROM arms
    GROUP BY run_id, arm
)
SELECT
    q.run_id,
    q.arm,
    q.concurrency,
    q.prompt_class,
    q.metric,
    q.baseline_value,
    q.value,
    CASE WHEN q.baseline_value > 0 THEN 100 * (q.value / q.baseline_value - 1) END AS delta_pct,
    q.check_name                                    AS "check",
    q.created_at,
    q.block,
    q.threshold,
    q.detail,
    a.image,
    a.vllm_version,
    a.method,
    r.started_at                                    AS run_started_at
FROM quality_results q
LEFT JOIN arm_info a USING (run_id, arm)
LEFT JOIN runs r USING (run_id)
WHERE q.severity = 'regression' AND NOT q.passed;
