-- One row per timed run of a sweep. prefill tok/s is the prompt over TTFT; acceptance is the
-- run's own window (1 + accepted / drafts, with the bonus token; per position: accepted / drafts).
CREATE OR REPLACE VIEW sweep_results AS
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
JOIN cells c USING (run_id, arm, round, cell)
WHERE c.depth IS NOT NULL AND r.status = 'ok';
