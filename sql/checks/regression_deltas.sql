-- Long format: one row per (candidate arm, block, cell, metric) next to
-- the baseline arm's matching cell, so one expectation on delta_pct judges every comparison.
-- Rejected cells are left out on both sides: a rejected cell is not a measurement.
-- Acceptance metrics are compared only between arms with the same k: mean acceptance length
-- is bounded by k + 1 and position i does not exist below k = i + 1.
-- Latency and goodput: p99s (lower is better, so delta = baseline / value - 1) and goodput
-- (higher is better); a p99 is NULL under 100 requests and goodput NULL without an SLO, and
-- a NULL side is no comparison.
WITH cell AS (
    SELECT c.arm, c.block, c.cell, c.concurrency, c.prompt_class, a.k,
           c.decode_tok_s_median, c.mean_acceptance_length,
           c.goodput_share, c.goodput_tok_s, c.ttft_ms_p99, c.tpot_ms_p99, c.itl_ms_p99, c.e2e_ms_p99
    FROM cells c
    JOIN arms a USING (run_id, arm, block)
    WHERE c.run_id = $run_id AND NOT c.rejected
),
pair AS (
    SELECT
        cand.arm, cand.block, cand.cell, cand.concurrency, cand.prompt_class,
        coalesce(cand.k = base.k, false)  AS same_k,  -- no speculation on either side: nothing to compare
        cand.decode_tok_s_median          AS cand_decode,
        base.decode_tok_s_median          AS base_decode,
        cand.mean_acceptance_length       AS cand_mal,
        base.mean_acceptance_length       AS base_mal,
        [{'metric': 'goodput_share', 'lower': false, 'value': cand.goodput_share, 'base': base.goodput_share},
         {'metric': 'goodput_tok_s', 'lower': false, 'value': cand.goodput_tok_s, 'base': base.goodput_tok_s},
         {'metric': 'ttft_ms_p99', 'lower': true, 'value': cand.ttft_ms_p99, 'base': base.ttft_ms_p99},
         {'metric': 'tpot_ms_p99', 'lower': true, 'value': cand.tpot_ms_p99, 'base': base.tpot_ms_p99},
         {'metric': 'itl_ms_p99', 'lower': true, 'value': cand.itl_ms_p99, 'base': base.itl_ms_p99},
         {'metric': 'e2e_ms_p99', 'lower': true, 'value': cand.e2e_ms_p99, 'base': base.e2e_ms_p99}]
                                          AS latency
    FROM cell cand
    JOIN cell base USING (block, cell)
    WHERE base.arm = $baseline_arm AND cand.arm <> $baseline_arm
),
metric AS (
    SELECT arm, block, cell, concurrency, prompt_class,
           'regression.decode_tok_s' AS check_name, 'decode_tok_s_median' AS metric,
           NULL::INTEGER AS position, cand_decode AS value, base_decode AS baseline_value, false AS lower
    FROM pair
    UNION ALL
    SELECT arm, block, cell, concurrency, prompt_class,
           'regression.acceptance_length', 'mean_acceptance_length',
           NULL::INTEGER, cand_mal, base_mal, false
    FROM pair
    WHERE same_k
    UNION ALL
    SELECT arm, block, cell, concurrency, prompt_class,
           CASE WHEN m.metric LIKE 'goodput%' THEN 'regression.goodput' ELSE 'regression.latency_p99' END,
           m.metric, NULL::INTEGER, m.value, m.base, m.lower
    FROM (SELECT *, unnest(latency) AS m FROM pair)
    UNION ALL
    SELECT p.arm, p.block, p.cell, p.concurrency, p.prompt_class,
           'regression.acceptance_position', 'acceptance_pos_' || sc.position,
           sc.position, sc.acceptance, sb.acceptance, false
    FROM pair p
    JOIN spec_positions sc
      ON sc.run_id = $run_id AND sc.arm = p.arm AND sc.block = p.block AND sc.cell = p.cell
    JOIN spec_positions sb
      ON sb.run_id = $run_id AND sb.arm = $baseline_arm AND sb.block = p.block AND sb.cell = p.cell
     AND sb.position = sc.position
    WHERE p.same_k
)
SELECT
    (row_number() OVER (
        ORDER BY arm, block, concurrency, prompt_class, cell, check_name, position NULLS FIRST
    ) - 1)::BIGINT AS row_id,
    arm, block, cell, concurrency, prompt_class, check_name, metric, position,
    value, baseline_value,
    CASE WHEN lower THEN baseline_value / value - 1 ELSE value / baseline_value - 1 END AS delta_pct
FROM metric
-- a relative delta needs both sides and a positive baseline; nothing can fall below a zero baseline
-- (nor is a latency of zero a measurement)
WHERE value IS NOT NULL AND baseline_value > 0 AND (NOT lower OR value > 0)
ORDER BY row_id;
