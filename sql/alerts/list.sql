-- Alerts, newest first; $open_only leaves out the closed ones (invalid, verified, wontfix).
SELECT alert_id, state, direction, series, summary, first_run_id, last_run_id, runs, opened_at, updated_at
FROM alerts
WHERE NOT $open_only OR state NOT IN ('invalid', 'verified', 'wontfix')
ORDER BY alert_id DESC
LIMIT $limit;
