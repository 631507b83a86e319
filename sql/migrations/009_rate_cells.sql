-- Open-loop (rate) cells beside closed-loop ones: the columns rate cells add.
--
-- cells: ramp_from_rate (a ramp's start rate; request_rate is its end), arrival and burstiness
-- (the inter-arrival law and its gamma shape), max_concurrency (the in-flight cap), achieved_rate ((sent - 1) / send span;
-- the send lateness p99 is the client check's, 008). requests: scheduled_s (planned send time, started_s's origin) and
-- send_lateness_s (started_s - scheduled_s). All NULL for closed-loop cells.
ALTER TABLE cells ADD COLUMN IF NOT EXISTS ramp_from_rate DOUBLE;
ALTER TABLE cells ADD COLUMN IF NOT EXISTS arrival VARCHAR;
ALTER TABLE cells ADD COLUMN IF NOT EXISTS burstiness DOUBLE;
ALTER TABLE cells ADD COLUMN IF NOT EXISTS max_concurrency INTEGER;
ALTER TABLE cells ADD COLUMN IF NOT EXISTS achieved_rate DOUBLE;
ALTER TABLE requests ADD COLUMN IF NOT EXISTS scheduled_s DOUBLE;
ALTER TABLE requests ADD COLUMN IF NOT EXISTS send_lateness_s DOUBLE;

-- The history views were re-created here for rate cells (load_point in the series key) until
-- issue 20: views live in sql/views/ and db.migrate re-creates them after the migrations.
