-- This run's points against their baseline points from history, in the long format of
-- regression_deltas.sql, so the same Great Expectations suite judges both.
-- Baseline per (arm, cell) point, in its own series (never across series):
--   $policy = 'previous-image': the most recent clean run on the highest vLLM version below
--                               this point's version;
--   'same-image': the most recent earlier clean run on the same version;
--   'auto': previous-image when such a run exists, else same-image;
--   'run': the run $baseline_run (same series).
-- Clean = no regression flag and no invalid cell. delta_pct is oriented so that negative is
-- worse for every metric (TTFT: lower is better, so baseline / value - 1).
WITH this AS (
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
           vc.v AS version_key,
           c.decode_tok_s_median, c.ttft_s_median, c.mean_acceptance_length
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
    SELECT t.arm, t.concurrency, t.prompt_class, t.prompt_tokens, t.cell, b.baseline_run, b.kind,
           'history.decode_tok_s' AS check_name, 'decode_tok_s_median' AS metric, NULL::INTEGER AS position,
           t.decode_tok_s_median AS value, b.decode_tok_s_median AS baseline_value,
           t.decode_tok_s_median / b.decode_tok_s_median - 1 AS delta_pct
    FROM this t JOIN base b USING (arm, series_key)
    UNION ALL
    SELECT t.arm, t.concurrency, t.prompt_class, t.prompt_tokens, t.cell, b.baseline_run, b.kind,
           'history.ttft_s', 'ttft_s_median', NULL,
           t.ttft_s_median, b.ttft_s_median, b.ttft_s_median / t.ttft_s_median - 1
    FROM this t JOIN base b USING (arm, series_key)
    UNION ALL
    SELECT t.arm, t.concurrency, t.prompt_class, t.prompt_tokens, t.cell, b.baseline_run, b.kind,
           'history.acceptance_length', 'mean_acceptance_length', NULL,
           t.mean_acceptance_length, b.mean_acceptance_length,
           t.mean_acceptance_length / b.mean_acceptance_length - 1
    FROM this t JOIN base b USING (arm, series_key)
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
          ON sc.run_id = c.run_id AND sc.arm = c.arm AND sc.block = c.block AND sc.cell = c.cell
        WHERE NOT c.rejected
        GROUP BY b.arm, b.concurrency, b.prompt_class, b.prompt_tokens, b.cell, b.baseline_run, b.kind, sc.position
    ) pos
    UNION ALL
    -- goodput (higher is better) and p99 latencies (lower is better), each the median over the
    -- arm's blocks on both sides; a NULL (no SLO, or under 100 requests) is no comparison
    SELECT l.arm, l.concurrency, l.prompt_class, l.prompt_tokens, l.cell, l.baseline_run, l.kind,
           CASE WHEN l.metric LIKE 'goodput%' THEN 'history.goodput' ELSE 'history.latency_p99' END,
           l.metric, NULL, l.value, l.baseline_value,
           CASE WHEN l.lower THEN l.baseline_value / l.value - 1 ELSE l.value / l.baseline_value - 1 END
    FROM (
        SELECT b.arm, b.concurrency, b.prompt_class, b.prompt_tokens, b.cell, b.baseline_run, b.kind,
               c.m.metric AS metric, c.m.lower AS lower,
               median(c.m.value) FILTER (WHERE c.run_id = $run_id) AS value,
               median(c.m.value) FILTER (WHERE c.run_id = b.baseline_run) AS baseline_value
        FROM base b
        JOIN (
            SELECT run_id, arm, cell, rejected, unnest([
                {'metric': 'goodput_share', 'lower': false, 'value': goodput_share},
                {'metric': 'goodput_tok_s', 'lower': false, 'value': goodput_tok_s},
                {'metric': 'ttft_ms_p99', 'lower': true, 'value': ttft_ms_p99},
                {'metric': 'tpot_ms_p99', 'lower': true, 'value': tpot_ms_p99},
                {'metric': 'itl_ms_p99', 'lower': true, 'value': itl_ms_p99},
                {'metric': 'e2e_ms_p99', 'lower': true, 'value': e2e_ms_p99}]) AS m
            FROM cells
        ) c
          ON c.cell = b.cell
         AND ((c.run_id = $run_id AND c.arm = b.arm) OR (c.run_id = b.baseline_run AND c.arm = b.baseline_arm))
        WHERE NOT c.rejected
        GROUP BY ALL
    ) l
)
SELECT
    (row_number() OVER (ORDER BY arm, concurrency, prompt_class, check_name, position NULLS FIRST) - 1)::BIGINT
        AS row_id,
    arm, NULL::INTEGER AS block, concurrency, prompt_class, prompt_tokens, cell, check_name, metric, position,
    value, baseline_value, delta_pct, baseline_run, kind
FROM metric
WHERE value > 0 AND baseline_value > 0
ORDER BY row_id;
