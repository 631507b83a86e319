-- The stored launch variances a run's looks read (issue 22): looked up before its first launch and kept
-- with the run (results.json `variance_priors`), so that a report made later judges the run on what it
-- read, not on calibrations stored since. A JSON list of {cell, metric, sd, df, source}; NULL for a run
-- recorded before runs kept them.
ALTER TABLE runs ADD COLUMN IF NOT EXISTS variance_priors JSON;
