-- The history of an arm of a run: every point of each series that the arm is a point of, oldest first
-- (one query for all its cells: where a change began).
SELECT p.*
FROM series_points p
WHERE p.series_key IN (SELECT series_key FROM series_points WHERE run_id = $run_id AND arm = $arm)
ORDER BY p.series_key, p.started_at;
