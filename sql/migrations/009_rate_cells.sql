-- Open-loop (rate) cells beside closed-loop ones: the columns rate cells add, and the history
-- views re-created so a rate cell is a series point of its own.
--
-- cells: ramp_from_rate (a ramp's start rate; request_rate is its end), arrival and burstiness
-- (the inter-arrival law and its gamma shape), max_concurrency (the in-flight cap), achieved_rate ((sent - 1) / send span;
-- the send lateness p99 is the client check's, 008). requests: scheduled_s (planned send time, started_s's origin) and
-- send_lateness_s (started_s - scheduled_s). All NULL for closed-loop cells.
ALTER TABLE cells ADD COLUMN IF NOT EXISTS ramp_from_rate DOUBLE;
ALTER TABLE cells ADD COLUMN IF NOT EXISTS arrival VARCHAR;
ALTER TABLE cells ADD COLUMN IF NOT EXISTS burstiness DOUBLE;
ALTER TABLE cells ADD COLUMN IF NOT EXISTS max_concurrency INTEGER;
ALTER TABLE cells ADD COLUMN IF NOT EXISTS achieved_rate DOUBLE;
ALTER TABLE requests ADD COLUMN IF NOT EXISTS scheduled_s DOUBLE;
ALTER TABLE requests ADD COLUMN IF NOT EXISTS send_lateness_s DOUBLE;

-- Series key (003): the element that held the concurrency now holds `load_point`: the same text
-- for a closed-loop cell (so every existing series keeps its key), and for a rate cell its level
-- (r2.5, or r1to8 for a ramp from 1 to 8 requests/s) with its arrival law, burstiness and cap, so a
-- rate cell never joins a closed-loop series nor one of another rate. load_level is the level
-- alone, as in the cell id (c4, r2.5, r1to8), for display and filters.
CREATE OR REPLACE VIEW series_cells AS
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
        c.load_mode,
        split_part(c.cell, '/', 2)                   AS load_level,
        c.request_rate,
        c.ramp_from_rate,
        c.arrival,
        c.burstiness,
        c.max_concurrency,
        -- where the key held the concurrency: the same text for closed-loop cells, so their series keep
        -- their keys; a rate cell's level with its arrival law and cap, e.g. 'r2.5 poisson b1' or
        -- 'r2.5 poisson b1 m16'
        CASE WHEN c.load_mode = 'closed' THEN CAST(c.concurrency AS VARCHAR)
             ELSE split_part(c.cell, '/', 2) || ' ' || c.arrival || ' b' || CAST(c.burstiness AS VARCHAR)
                  || coalesce(' m' || CAST(c.max_concurrency AS VARCHAR), '')
        END                                          AS load_point,
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
        c.cell,
        r.started_at,
        c.decode_tok_s_median,
        c.ttft_s_median,
        c.aggregate_tok_s,
        c.tpot_ms_median,
        c.achieved_rate,
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
        CAST(prompt_tokens AS VARCHAR), CAST(max_tokens AS VARCHAR), load_point,
        sampling, cpu_model, gpu_model, CAST(gpu_count AS VARCHAR), CAST(tensor_parallel_size AS VARCHAR)
    ]) AS VARCHAR))                                  AS series_key,
    -- display only (series_key is what separates series)
    coalesce(cpu_model, 'unknown CPU')
        || CASE WHEN gpu_count > 0 THEN ' + ' || gpu_count || 'x ' || coalesce(gpu_model, 'unknown GPU') ELSE '' END
        || ' tp' || tensor_parallel_size             AS host_class,
    *
FROM keyed;

CREATE OR REPLACE VIEW series_points AS
SELECT
    s.series_key, s.host_class,
    s.model, s.checkpoint_config_sha256, s.method, s.k,
    s.prompt_class, s.prompt_tokens, s.max_tokens, s.concurrency, s.sampling,
    s.load_mode, s.load_level, s.request_rate, s.ramp_from_rate, s.arrival, s.burstiness, s.load_point, s.cell,
    s.cpu_model, s.gpu_model, s.gpu_count, s.tensor_parallel_size,
    s.image, s.vllm_version, s.run_id, s.arm, s.started_at,
    f.regression_flagged,
    count(*)                           AS blocks,
    median(s.decode_tok_s_median)      AS decode_tok_s_median,
    median(s.ttft_s_median)            AS ttft_s_median,
    median(s.aggregate_tok_s)          AS aggregate_tok_s,
    median(s.tpot_ms_median)           AS tpot_ms_median,
    median(s.achieved_rate)            AS achieved_rate,
    median(s.mean_acceptance_length)   AS mean_acceptance_length,
    median(s.draft_acceptance_rate)    AS draft_acceptance_rate
FROM series_cells s
JOIN run_flags f USING (run_id)
GROUP BY ALL;

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

CREATE OR REPLACE VIEW comparisons AS
SELECT
    a.axis, a.side AS side_a, b.side AS side_b,
    a.model, a.method, a.k, a.vllm_version, a.concurrency, a.load_mode, a.load_level, a.request_rate,
    a.ramp_from_rate, a.arrival, a.burstiness, a.prompt_class, a.prompt_tokens, a.max_tokens,
    a.host_class,
    a.runs                                                                    AS runs_a,
    b.runs                                                                    AS runs_b,
    round(a.decode_tok_s, 2)                                                  AS decode_tok_s_a,
    round(b.decode_tok_s, 2)                                                  AS decode_tok_s_b,
    round(100 * (b.decode_tok_s / a.decode_tok_s - 1), 2)                     AS decode_delta_pct,
    round(a.mean_acceptance_length, 3)                                        AS mean_acceptance_length_a,
    round(b.mean_acceptance_length, 3)                                        AS mean_acceptance_length_b,
    round(100 * (b.mean_acceptance_length / a.mean_acceptance_length - 1), 2) AS acceptance_delta_pct,
    a.series_key
FROM comparable_points a
JOIN comparable_points b ON b.axis = a.axis AND b.pair_key = a.pair_key AND b.side <> a.side;
