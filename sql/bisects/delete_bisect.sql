-- A bisect is stored again after every step: its rows are replaced.
DELETE FROM bisects WHERE bisect_id = $bisect_id;
