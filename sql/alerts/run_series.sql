-- The history series (series_points) an arm of a run is a point of.
SELECT DISTINCT series_key FROM series_points WHERE run_id = $run_id AND arm = $arm ORDER BY series_key;
