-- The stored launch variances of one key (specwatch/store/priors.py), one row per calibration, cell and
-- metric: priors.py pools them with the key's exported files (df-weighted variance, df summed; a
-- composite only over the same cells). $run_id (NULL: every calibration of the key) keeps one named
-- calibration (design.variance_from).
SELECT run_id, cell, metric, composite_of, sd, df, measured_at
FROM variance_priors
WHERE platform = $platform AND hardware = $hardware AND hardware_count = $hardware_count
  AND image = $image AND model = $model AND df > 0
  AND ($run_id IS NULL OR run_id = $run_id)
ORDER BY run_id, cell, metric;
