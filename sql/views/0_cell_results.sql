CREATE OR REPLACE VIEW cell_results AS
SELECT
    c.run_id,
    c.arm,
    c.round,
    a.image,
    a.vllm_version,
    a.method,
    a.k,
    c.concurrency,
    c.prompt_class,
    c.prompt_tokens,
    c.max_tokens,
    c.decode_tok_s_median,
    c.ttft_s_median,
    c.aggregate_tok_s,
    c.server_aggregate_tok_s,
    c.mean_acceptance_length,
    c.draft_acceptance_rate,
    c.prefix_cache_hit_rate,
    c.requests_ok,
    c.requests_failed,
    c.rejected,
    c.reject_reason,
    r.started_at
FROM cells c
JOIN arms a USING (run_id, arm, round)
JOIN runs r USING (run_id);
