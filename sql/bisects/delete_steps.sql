-- A bisect is stored again after every step: its step rows are replaced.
DELETE FROM bisect_steps WHERE bisect_id = $bisect_id;
