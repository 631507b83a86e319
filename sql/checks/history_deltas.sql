-- This run's points against their baseline points from history, in the long format of
-- regression_deltas.sql, so the same Great Expectations suite judges both.
-- Baseline per (arm, cell) point, in its own series (never across series):
--   $policy = 'previous-image': the most recent clean run on the highest vLLM version below
--                               this point's version;
--   'same-image': the most recent earlier clean run on the same version;
--   'auto': previous-image when such a run exists, else same-image;
--   'run': the run $baseline_run (same series).
-- Clean = no regression flag and no invalid cell. The metrics are the catalogue's, bound as
-- $catalogue (see regression_deltas.sql). delta_pct is oriented so that negative is worse for
-- every metric (TTFT: lower is better, so baseline / value - 1).
WITH catalogue AS (
    SELECT unnest($catalogue, recursive := true)
),
this AS (
    SELECT * FROM series_points WHERE run_id = $run_id
),
clean AS (
    SELECT p.*
    FROM series_points p
    JOIN run_flags f USING (run_id)
    WHERE p.run_id <> $run_id AND NOT f.regression_flagged AND NOT f.invalid_flagged
),
version_order AS (
    -- '0.10.0' sorts after '0.9.1': compare versions as integer lists, not strings
    SELECT DISTINCT vllm_version,
           list_transform(string_split(regexp_extract(vllm_version, '^[0-9.]+'), '.'),
                          lambda x: TRY_CAST(x AS INTEGER)) AS v
    FROM series_points
),
candidates AS (
    SELECT t.arm, t.series_key, t.concurrency, t.prompt_class, t.prompt_tokens, t.cell, t.started_at AS this_started,
           c.run_id AS baseline_run, c.arm AS baseline_arm, c.started_at, c.vllm_version,
           CASE
               WHEN $policy = 'run' THEN 'run'
               WHEN vc.v < vt.v THEN 'previous-image'
               WHEN c.vllm_version = t.vllm_version THEN 'same-image'
           END AS kind,
           vc.v AS version_key
    FROM this t
    JOIN clean c USING (series_key)
    JOIN version_order vt ON vt.vllm_version = t.vllm_version
    JOIN version_order vc ON vc.vllm_version = c.vllm_version
    WHERE ($policy = 'run' AND c.run_id = $baseline_run)
       OR ($policy <> 'run' AND c.started_at < t.started_at)
),
ranked AS (
    SELECT *,
           row_number() OVER (
               PARTITION BY arm, series_key
               ORDER BY
                   -- auto prefers a previous image; each policy keeps only its own kind
                   CASE WHEN kind = 'run' THEN 0 WHEN kind = 'previous-image' THEN 1 ELSE 2 END,
                   version_key DESC, started_at DESC
           ) AS rank
    FROM candidates
    WHERE kind IS NOT NULL
      AND ($policy IN ('auto', 'run') OR kind = $policy)
),
base AS (SELECT * FROM ranked WHERE rank = 1),
metric AS (
    -- the catalogue's metrics, each the median over the arm's rounds on both sides; a metric a
    -- cell lacks (no SLO, under 100 requests) has no row, and a side without one is no comparison
    SELECT l.arm, l.concurrency, l.prompt_class, l.prompt_tokens, l.cell, l.baseline_run, l.kind,
           'history.' || l.family AS check_name, l.metric, NULL::INTEGER AS position, l.value, l.baseline_value,
           CASE WHEN l.lower THEN l.baseline_value / l.value - 1 ELSE l.value / l.baseline_value - 1 END AS delta_pct
    FROM (
        SELECT b.arm, b.concurrency, b.prompt_class, b.prompt_tokens, b.cell, b.baseline_run, b.kind,
               k.metric, k.family, k.lower,
               median(m.value) FILTER (WHERE c.run_id = $run_id) AS value,
               median(m.value) FILTER (WHERE c.run_id = b.baseline_run) AS baseline_value
        FROM base b
        JOIN cells c
          ON c.cell = b.cell
         AND ((c.run_id = $run_id AND c.arm = b.arm) OR (c.run_id = b.baseline_run AND c.arm = b.baseline_arm))
        JOIN cell_metrics m ON m.run_id = c.run_id AND m.arm = c.arm AND m.round = c.round AND m.cell = c.cell
        JOIN catalogue k ON k.metric = m.metric
        -- a skipped depth is no point (as in the series views); a looping cell stored no acceptance metrics
        WHERE NOT c.rejected AND c.skip_reason IS NULL
        GROUP BY ALL
    ) l
    UNION ALL
    SELECT pos.arm, pos.concurrency, pos.prompt_class, pos.prompt_tokens, pos.cell, pos.baseline_run, pos.kind,
           'history.acceptance_position', 'acceptance_pos_' || pos.position, pos.position,
           pos.value, pos.baseline_value, pos.value / pos.baseline_value - 1
    FROM (
        SELECT b.arm, b.concurrency, b.prompt_class, b.prompt_tokens, b.cell, b.baseline_run, b.kind, sc.position,
               median(sc.acceptance) FILTER (WHERE sc.run_id = $run_id) AS value,
               median(sc.acceptance) FILTER (WHERE sc.run_id = b.baseline_run) AS baseline_value
        FROM base b
        JOIN cells c
          ON c.cell = b.cell
         AND ((c.run_id = $run_id AND c.arm = b.arm) OR (c.run_id = b.baseline_run AND c.arm = b.baseline_arm))
        JOIN spec_positions sc
          ON sc.run_id = c.run_id AND sc.arm = c.arm AND sc.round = c.round AND sc.cell = c.cell
        WHERE NOT c.rejected
        GROUP BY b.arm, b.concurrency, b.prompt_class, b.prompt_tokens, b.cell, b.baseline_run, b.kind, sc.position
    ) pos
)
SELECT
    (row_number() OVER (ORDER BY arm, concurrency, prompt_class, cell, check_name, position NULLS FIRST, metric)
        - 1)::BIGINT AS row_id,
    arm, NULL::INTEGER AS round, concurrency, prompt_class, prompt_tokens, cell, check_name, metric, position,
    value, baseline_value, delta_pct, baseline_run, kind
FROM metric
WHERE value > 0 AND baseline_value > 0
ORDER BY row_id;
