-- The catalogue metrics $metrics at every point of the series whose key starts with $series: one row
-- per (point, metric), the median over the point's rounds (series_cells holds no rejected cell and no
-- skipped depth; a cell without a metric has no row for it).
SELECT s.series_key, s.run_id, s.arm, m.metric, median(m.value) AS value
FROM series_cells s
JOIN cell_metrics m USING (run_id, arm, round, cell)
WHERE starts_with(s.series_key, $series) AND list_contains($metrics, m.metric)
GROUP BY ALL;
