-- One row per non-rejected cell (every round), with its series fields, as measured:
-- series_cells (1_) is what history reads. Reads only the per-cell aggregates written at
-- ingest (cells); nothing here touches the requests table.
--
-- Series key (issue 5, "History and regressions"): model + checkpoint config hash, method,
-- k (the k that ran), workload (prompt class, prompt tokens, max tokens, load point,
-- sampling) and host class (CPU model, GPU model, GPU count, tensor-parallel size).
-- The image / vLLM version is NOT in the key: it is what history compares along a series.
-- series_key = md5 of the JSON array of those fields, in this order, all as text:
--   [model, checkpoint_config_sha256, method, k, prompt_class, prompt_tokens, max_tokens,
--    load_point, sampling, cpu_model, gpu_model, gpu_count, tensor_parallel_size]
-- A missing field is JSON null, so NULL never collides with any value.
--
-- load_point is where the key held the concurrency until migration 009: the same text for a
-- closed-loop cell (so every series older than rate cells keeps its key), and for a rate cell
-- its level (r2.5, or r1to8 for a ramp from 1 to 8 requests/s) with its arrival law, burstiness
-- and cap, so a rate cell never joins a closed-loop series nor one of another rate. load_level
-- is the level alone, as in the cell id (c4, r2.5, r1to8), for display and filters.
CREATE OR REPLACE VIEW series_cells_measured AS
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
        run_id, arm, round, image, vllm_version, method, k,
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
        c.round,
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
    JOIN arm_keys a USING (run_id, arm, round)
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
