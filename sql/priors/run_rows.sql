-- One calibration's rows with its key, as `specwatch export-variance` writes them to a file
-- (specwatch/store/prior_file.py).
SELECT platform, hardware, hardware_count, image, model, arm, cell, metric, sd, df, composite_of, measured_at
FROM variance_priors
WHERE run_id = $run_id
ORDER BY cell, metric;
