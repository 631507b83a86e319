-- The history series' cells (series_cells_measured, 0_): a sweep point in a loop keeps its data
-- but leaves the acceptance trend (the drafter predicts the loop, so acceptance is inflated); a
-- skipped depth is no point at all.
CREATE OR REPLACE VIEW series_cells AS
SELECT s.* REPLACE (
    CASE WHEN c.loop_detected THEN NULL ELSE s.mean_acceptance_length END AS mean_acceptance_length,
    CASE WHEN c.loop_detected THEN NULL ELSE s.draft_acceptance_rate END  AS draft_acceptance_rate
)
FROM series_cells_measured s
JOIN cells c USING (run_id, arm, round, cell)
WHERE c.skip_reason IS NULL;
