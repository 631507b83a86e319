-- A run is regression-flagged when any regression check failed, invalid-flagged when any
-- sanity check failed (the baseline policy skips both kinds).
CREATE OR REPLACE VIEW run_flags AS
SELECT
    r.run_id,
    r.started_at,
    r.exit_code,
    coalesce(bool_or(q.severity = 'regression' AND NOT q.passed), false) AS regression_flagged,
    coalesce(bool_or(q.severity = 'invalid' AND NOT q.passed), false)    AS invalid_flagged
FROM runs r
LEFT JOIN quality_results q USING (run_id)
GROUP BY r.run_id, r.started_at, r.exit_code;
