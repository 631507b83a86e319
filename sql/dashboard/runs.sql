-- The latest runs with what they decided and whether their checks flagged them (a hint, not an alert).
SELECT r.run_id, r.experiment_name, r.started_at, r.exit_code, f.regression_flagged, f.invalid_flagged,
       string_agg(d.candidate_arm || ' ' || d.outcome, ', ' ORDER BY d.candidate_arm) AS decided
FROM (SELECT run_id, experiment_name, started_at, exit_code FROM runs ORDER BY started_at DESC LIMIT $limit) r
JOIN run_flags f USING (run_id)
LEFT JOIN decisions d USING (run_id)
GROUP BY ALL
ORDER BY r.started_at DESC;
