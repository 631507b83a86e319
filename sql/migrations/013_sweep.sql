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

-- sweep_results was created here, and series_cells re-created over series_cells_measured, until
-- issue 20: views live in sql/views/ and db.migrate re-creates them after the migrations.
