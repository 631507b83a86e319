-- The stored launch variances of one key (specwatch/store/priors.py), one row per cell and metric,
-- several calibrations pooled: variance weighted by df (sum(df * sd^2) / sum(df)), df summed. A composite
-- pools only calibrations over the same cells, so composite_of is part of its group. $run_id (NULL: every
-- calibration of the key) keeps one named calibration (design.variance_from).
SELECT cell, metric, composite_of,
       sqrt(sum(df * sd * sd) / sum(df)) AS sd,
       CAST(sum(df) AS INTEGER) AS df,
       string_agg(DISTINCT run_id, ', ' ORDER BY run_id) AS runs,
       max(measured_at) AS measured_at
FROM variance_priors
WHERE platform = $platform AND hardware = $hardware AND hardware_count = $hardware_count
  AND image = $image AND model = $model AND df > 0
  AND ($run_id IS NULL OR run_id = $run_id)
GROUP BY cell, metric, composite_of
ORDER BY cell, metric;
