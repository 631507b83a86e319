-- A calibration stored again replaces its rows.
DELETE FROM variance_priors WHERE run_id = $run_id;
