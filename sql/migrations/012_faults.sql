-- Faults (issue 12): a run cut short (Ctrl-C, cancellation, SIGTERM) is stored and marked partial; a
-- failed request keeps its failure class; a cell whose /metrics failed says why it has no counters.
ALTER TABLE runs ADD COLUMN partial BOOLEAN DEFAULT false;
ALTER TABLE runs ADD COLUMN interrupted VARCHAR;
ALTER TABLE cells ADD COLUMN counters_error VARCHAR;
ALTER TABLE requests ADD COLUMN error_kind VARCHAR;
