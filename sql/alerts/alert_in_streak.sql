-- The alert already open for this streak of a change: same series and direction, first-bad run after the
-- streak's start boundary $since (NULL: the series' beginning).
SELECT alert_id, state, last_run_id
FROM alerts
WHERE series = $series AND direction = $direction AND ($since IS NULL OR first_started_at > $since)
ORDER BY first_started_at
LIMIT 1;
