-- The latest decided comparison on a series before $started_at whose outcome is not $outcome: where the
-- current streak of $outcome began after. INCONCLUSIVE decided nothing and breaks no streak.
SELECT run_id, started_at
FROM decisions
WHERE series = $series AND outcome <> 'INCONCLUSIVE' AND outcome <> $outcome AND started_at < $started_at
ORDER BY started_at DESC
LIMIT 1;
