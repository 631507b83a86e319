-- Context-length sweeps (issue 13, flows/sweep.py). A sweep point is a cell of one stream whose
-- prompt is calibrated to `depth` tokens (depth is also the cell key's prompt_tokens, so a point
-- joins the history series of its depth); a depth the server could not hold keeps its skip_reason
-- and no requests. Each run of a point is a request with its own /metrics window (one stream at a
-- time), the prompt's own repetition ratio and the loop detector's verdict.
ALTER TABLE cells ADD COLUMN IF NOT EXISTS depth INTEGER;
ALTER TABLE cells ADD COLUMN IF NOT EXISTS skip_reason VARCHAR;
ALTER TABLE cells ADD COLUMN IF NOT EXISTS loop_detected BOOLEAN;
ALTER TABLE requests ADD COLUMN IF NOT EXISTS window_drafts DOUBLE;
ALTER TABLE requests ADD COLUMN IF NOT EXISTS window_accepted_tokens DOUBLE;
ALTER TABLE requests ADD COLUMN IF NOT EXISTS window_accepted_per_position DOUBLE[];
ALTER TABLE requests ADD COLUMN IF NOT EXISTS prompt_repetition_ratio DOUBLE;
ALTER TABLE requests ADD COLUMN IF NOT EXISTS loop_detected BOOLEAN;

-- One row per timed run of a sweep. prefill tok/s is the prompt over TTFT; acceptance is the
-- run's own window (1 + accepted / drafts, with the bonus token; per position: accepted / drafts).
CREATE VIEW sweep_results AS
SELECT
    r.run_id,
    r.arm,
    c.depth,
    r.prompt_tokens,
    r.ttft_s,
    r.prompt_tokens / nullif(r.ttft_s, 0)                             AS prefill_tok_s,
    r.decode_tok_s,
    1 + r.window_accepted_tokens / nullif(r.window_drafts, 0)         AS mean_acceptance_length,
    CASE WHEN r.window_drafts > 0
         THEN list_transform(r.window_accepted_per_position, lambda a: a / r.window_drafts) END
                                                                      AS acceptance_per_position,
    r.repetition_ratio,
    r.loop_detected
FROM requests r
JOIN cells c USING (run_id, arm, block, cell)
WHERE c.depth IS NOT NULL AND r.status = 'ok';

-- History (003/009): a sweep point in a loop keeps its data but leaves the acceptance trend (the
-- drafter predicts the loop, so acceptance is inflated); a skipped depth is no point at all. The
-- views built on series_cells read it by name, so they see this one.
ALTER VIEW series_cells RENAME TO series_cells_measured;
CREATE VIEW series_cells AS
SELECT s.* REPLACE (
    CASE WHEN c.loop_detected THEN NULL ELSE s.mean_acceptance_length END AS mean_acceptance_length,
    CASE WHEN c.loop_detected THEN NULL ELSE s.draft_acceptance_rate END  AS draft_acceptance_rate
)
FROM series_cells_measured s
JOIN cells c USING (run_id, arm, block, cell)
WHERE c.skip_reason IS NULL;
