-- The first decided run of the current streak of $outcome on a series: the earliest $outcome after $since
-- (NULL: the series' beginning), up to $started_at.
SELECT run_id, started_at
FROM decisions
WHERE series = $series AND outcome = $outcome AND started_at <= $started_at
  AND ($since IS NULL OR started_at > $since)
ORDER BY started_at
LIMIT 1;
