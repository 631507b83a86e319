-- Long format: one row per (candidate arm, round, cell, metric) next to
-- the baseline arm's matching cell, so one expectation on delta_pct judges every comparison.
-- The metrics are the catalogue's (specwatch/analysis/metrics.py), bound as $catalogue: one
-- {metric, lower, family, in_run, acceptance} per delta-checked metric; their values are the
-- cell_metrics rows ingest wrote. Lower is better for latencies, so their delta = baseline / value - 1.
-- Rejected cells are left out on both sides: a rejected cell is not a measurement.
-- Acceptance metrics are compared only between arms with the same k: mean acceptance length
-- is bounded by k + 1 and position i does not exist below k = i + 1.
-- A metric a cell lacks (a p99 under 100 requests, goodput without an SLO) has no row: no comparison.
WITH catalogue AS (
    SELECT unnest($catalogue, recursive := true)
),
cell AS (
    SELECT c.arm, c.round, c.cell, c.concurrency, c.prompt_class, a.k
    FROM cells c
    JOIN arms a USING (run_id, arm, round)
    WHERE c.run_id = $run_id AND NOT c.rejected
),
pair AS (
    SELECT
        cand.arm, cand.round, cand.cell, cand.concurrency, cand.prompt_class,
        coalesce(cand.k = base.k, false) AS same_k  -- no speculation on either side: nothing to compare
    FROM cell cand
    JOIN cell base USING (round, cell)
    WHERE base.arm = $baseline_arm AND cand.arm <> $baseline_arm
),
metric AS (
    SELECT p.arm, p.round, p.cell, p.concurrency, p.prompt_class,
           'regression.' || k.family AS check_name, k.metric, NULL::INTEGER AS position,
           mc.value, mb.value AS baseline_value, k.lower
    FROM pair p
    JOIN catalogue k ON k.in_run AND (p.same_k OR NOT k.acceptance)
    JOIN cell_metrics mc
      ON mc.run_id = $run_id AND mc.arm = p.arm AND mc.round = p.round AND mc.cell = p.cell AND mc.metric = k.metric
    JOIN cell_metrics mb
      ON mb.run_id = $run_id AND mb.arm = $baseline_arm AND mb.round = p.round AND mb.cell = p.cell
     AND mb.metric = k.metric
    UNION ALL
    SELECT p.arm, p.round, p.cell, p.concurrency, p.prompt_class,
           'regression.acceptance_position', 'acceptance_pos_' || sc.position,
           sc.position, sc.acceptance, sb.acceptance, false
    FROM pair p
    JOIN spec_positions sc
      ON sc.run_id = $run_id AND sc.arm = p.arm AND sc.round = p.round AND sc.cell = p.cell
    JOIN spec_positions sb
      ON sb.run_id = $run_id AND sb.arm = $baseline_arm AND sb.round = p.round AND sb.cell = p.cell
     AND sb.position = sc.position
    WHERE p.same_k
)
SELECT
    (row_number() OVER (
        ORDER BY arm, round, concurrency, prompt_class, cell, check_name, position NULLS FIRST, metric
    ) - 1)::BIGINT AS row_id,
    arm, round, cell, concurrency, prompt_class, check_name, metric, position,
    value, baseline_value,
    CASE WHEN lower THEN baseline_value / value - 1 ELSE value / baseline_value - 1 END AS delta_pct
FROM metric
-- a relative delta needs both sides and a positive baseline; nothing can fall below a zero baseline
-- (nor is a latency of zero a measurement)
WHERE value IS NOT NULL AND baseline_value > 0 AND (NOT lower OR value > 0)
ORDER BY row_id;
