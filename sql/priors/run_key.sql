-- The key a calibration run was stored under (design.variance_from names it); no row: not a calibration.
SELECT DISTINCT platform, hardware, hardware_count, image, model, arm
FROM variance_priors
WHERE run_id = $run_id;
