-- Workloads (issue 10): a cell whose requests share prefixes on purpose (multi-turn classes,
-- workload.nonce: false) reports its prefix-cache hit rate instead of being gated on it; a corpus
-- line may set its request's own output length.
ALTER TABLE cells ADD COLUMN prefix_cache_gate BOOLEAN DEFAULT true;
ALTER TABLE requests ADD COLUMN max_tokens INTEGER;
