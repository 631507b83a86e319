-- name: past-bisects
-- params: name=NULL, metric=NULL
-- The bisects run so far, newest first: the range of versions, the metric and cells, the answer (one
-- culprit, several changes, or why neither), the culprits verified by a fresh A/B, the images skipped, the
-- A/Bs and launches it took and its wall time in minutes, and the bound on its error. Optional filters:
-- name (the bisect file's name), metric. `specwatch sql "select * from bisect_results where bisect_id = '...'"`
-- lists one bisect's steps.
SELECT
    bisect_id,
    name,
    string_split(versions, ' ')[1] || ' .. ' || string_split(versions, ' ')[-1] AS versions,
    metric,
    cells,
    status,
    headline,
    culprits,
    skipped,
    (SELECT count(*) FROM bisect_steps s WHERE s.bisect_id = b.bisect_id) AS ab_runs,
    launches,
    round(wall_s / 60, 1) AS wall_min,
    family_error,
    step_alpha,
    started_at
FROM bisects b
WHERE ($name IS NULL OR name = $name)
  AND ($metric IS NULL OR metric = $metric)
ORDER BY started_at DESC;
