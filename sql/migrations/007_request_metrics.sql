-- Results schema v3: latency percentiles and goodput per cell, KV-cache and preemption figures,
-- request ids, chunk-gap (ITL) histograms and the server's per-request speculative figures.
-- Every column is nullable: rows ingested from v1/v2 runs never measured them.
ALTER TABLE cells ADD COLUMN ttft_ms_p50 DOUBLE;
ALTER TABLE cells ADD COLUMN ttft_ms_p90 DOUBLE;
ALTER TABLE cells ADD COLUMN ttft_ms_p99 DOUBLE;
ALTER TABLE cells ADD COLUMN tpot_ms_p50 DOUBLE;
ALTER TABLE cells ADD COLUMN tpot_ms_p90 DOUBLE;
ALTER TABLE cells ADD COLUMN tpot_ms_p99 DOUBLE;
ALTER TABLE cells ADD COLUMN itl_ms_p50 DOUBLE;
ALTER TABLE cells ADD COLUMN itl_ms_p90 DOUBLE;
ALTER TABLE cells ADD COLUMN itl_ms_p99 DOUBLE;
ALTER TABLE cells ADD COLUMN e2e_ms_p50 DOUBLE;
ALTER TABLE cells ADD COLUMN e2e_ms_p90 DOUBLE;
ALTER TABLE cells ADD COLUMN e2e_ms_p99 DOUBLE;
ALTER TABLE cells ADD COLUMN slo_ttft_ms DOUBLE;
ALTER TABLE cells ADD COLUMN slo_tpot_ms DOUBLE;
ALTER TABLE cells ADD COLUMN slo_e2e_ms DOUBLE;
ALTER TABLE cells ADD COLUMN goodput_requests INTEGER;
ALTER TABLE cells ADD COLUMN goodput_share DOUBLE;
ALTER TABLE cells ADD COLUMN goodput_tok_s DOUBLE;
ALTER TABLE cells ADD COLUMN kv_cache_usage_peak DOUBLE;
ALTER TABLE cells ADD COLUMN kv_cache_polls INTEGER;
ALTER TABLE cells ADD COLUMN preemptions DOUBLE;

ALTER TABLE requests ADD COLUMN request_id VARCHAR;
ALTER TABLE requests ADD COLUMN tpot_ms DOUBLE;
ALTER TABLE requests ADD COLUMN itl_hist JSON;
ALTER TABLE requests ADD COLUMN spec_steps INTEGER;
ALTER TABLE requests ADD COLUMN spec_accepted_tokens INTEGER;
ALTER TABLE requests ADD COLUMN spec_draft_tokens INTEGER;
ALTER TABLE requests ADD COLUMN spec_acceptance_histogram INTEGER[];
ALTER TABLE requests ADD COLUMN spec_mean_acceptance_length DOUBLE;
ALTER TABLE requests ADD COLUMN spec_draft_acceptance_rate DOUBLE;

ALTER TABLE arms ADD COLUMN kv_cache_tokens BIGINT;
ALTER TABLE arms ADD COLUMN kv_cache_source VARCHAR;
