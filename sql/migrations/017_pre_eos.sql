-- Loops judged on what the model meant to write (issue 21): a request's repetition_ratio is now of its
-- output before the first end-of-sequence token, and pre_eos_tokens is that part's length (all of the
-- output without an EOS; NULL where the checkpoint's EOS ids were not known). The tail's share of a
-- cell's tokens is computed from it (specwatch.report.classes).
ALTER TABLE requests ADD COLUMN IF NOT EXISTS pre_eos_tokens INTEGER;
