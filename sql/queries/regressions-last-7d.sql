-- name: regressions-last-7d
-- params: days=7
-- Failed regression checks recorded in the last $days days (default 7), newest first and,
-- within a run, the largest drop first: one row per flagged metric of a candidate arm's cell
-- against its baseline (e.g. decode tok/s, mean acceptance length, acceptance at a
-- speculative position). delta_pct = 100 * (value / baseline_value - 1); threshold is the
-- check's band. Reads the regressions view (failed checks of severity 'regression' only;
-- passed checks and invalid-cell checks never appear).
SELECT
    created_at,
    run_id,
    arm,
    vllm_version,
    round,
    concurrency,
    prompt_class,
    "check",
    metric,
    round(baseline_value, 4)  AS baseline_value,
    round(value, 4)           AS value,
    round(delta_pct, 2)       AS delta_pct,
    threshold,
    detail
FROM regressions
WHERE created_at >= current_timestamp - INTERVAL (CAST($days AS INTEGER)) DAY
ORDER BY created_at DESC, run_id, delta_pct, arm, round, concurrency, prompt_class, metric;
