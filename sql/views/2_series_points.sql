-- One point per (run, arm, cell) of a series: each metric is the median over the arm's
-- rounds (rounds = how many rounds were kept). Named queries read this view.
CREATE OR REPLACE VIEW series_points AS
SELECT
    s.series_key, s.host_class,
    s.model, s.checkpoint_config_sha256, s.method, s.k,
    s.prompt_class, s.prompt_tokens, s.max_tokens, s.concurrency, s.sampling,
    s.load_mode, s.load_level, s.request_rate, s.ramp_from_rate, s.arrival, s.burstiness, s.load_point, s.cell,
    s.cpu_model, s.gpu_model, s.gpu_count, s.tensor_parallel_size,
    s.image, s.vllm_version, s.run_id, s.arm, s.started_at,
    f.regression_flagged,
    count(*)                           AS rounds,
    median(s.decode_tok_s_median)      AS decode_tok_s_median,
    median(s.ttft_s_median)            AS ttft_s_median,
    median(s.aggregate_tok_s)          AS aggregate_tok_s,
    median(s.tpot_ms_median)           AS tpot_ms_median,
    median(s.achieved_rate)            AS achieved_rate,
    median(s.mean_acceptance_length)   AS mean_acceptance_length,
    median(s.draft_acceptance_rate)    AS draft_acceptance_rate
FROM series_cells s
JOIN run_flags f USING (run_id)
GROUP BY ALL;
