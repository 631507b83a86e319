-- The points of one sweep run: one row per (arm, depth), the runs of all its rounds together.
-- Decode tok/s per run and per round (the round's median run) for intervals; rejected cells add
-- no figures. Acceptance is averaged over the runs that did not loop (a loop inflates it); the
-- looping runs' own figure is kept beside it. A skipped depth is a row with its reason only.
-- The trend lists (what the depth-to-depth checks and the per-doubling fit read) also leave out a
-- speculating arm's looping runs: a loop drafts well, so their decode is as inflated as their
-- acceptance. An arm without speculation keeps them: a loop cannot change its speed.
WITH runs AS (
    SELECT c.arm, c.round, c.depth, c.cell, c.skip_reason, c.rejected,
           r.decode_tok_s, r.ttft_s, r.prompt_tokens, r.repetition_ratio, r.prompt_repetition_ratio,
           r.loop_detected,
           1 + r.window_accepted_tokens / nullif(r.window_drafts, 0) AS acceptance_length,
           coalesce(r.loop_detected AND a.k IS NOT NULL, false)      AS inflated
    FROM cells c
    JOIN arms a ON a.run_id = c.run_id AND a.arm = c.arm AND a.round = c.round
    LEFT JOIN requests r
        ON r.run_id = c.run_id AND r.arm = c.arm AND r.round = c.round AND r.cell = c.cell
       AND r.status = 'ok' AND NOT c.rejected
    WHERE c.run_id = $run_id AND c.depth IS NOT NULL
),
per_round AS (
    SELECT arm, depth, round, median(decode_tok_s) AS decode_tok_s,
           median(decode_tok_s) FILTER (WHERE NOT inflated) AS trend_decode_tok_s
    FROM runs
    WHERE decode_tok_s IS NOT NULL
    GROUP BY ALL
),
round_lists AS (
    SELECT arm, depth, list(decode_tok_s ORDER BY round) AS round_decodes,
           list(trend_decode_tok_s ORDER BY round) FILTER (WHERE trend_decode_tok_s IS NOT NULL)
               AS trend_round_decodes
    FROM per_round
    GROUP BY ALL
)
SELECT
    r.arm,
    r.depth,
    any_value(r.cell)                                                            AS cell,
    count(r.decode_tok_s)                                                        AS runs,
    coalesce(b.round_decodes, [])                                                AS round_decodes,
    coalesce(list(r.decode_tok_s) FILTER (WHERE r.decode_tok_s IS NOT NULL), []) AS run_decodes,
    coalesce(b.trend_round_decodes, [])                                          AS trend_round_decodes,
    coalesce(list(r.decode_tok_s) FILTER (WHERE r.decode_tok_s IS NOT NULL AND NOT r.inflated), [])
                                                                                 AS trend_run_decodes,
    median(r.ttft_s)                                                             AS ttft_s,
    median(r.prompt_tokens / nullif(r.ttft_s, 0))                                AS prefill_tok_s,
    avg(r.acceptance_length) FILTER (WHERE NOT r.loop_detected)                  AS mean_acceptance_length,
    avg(r.acceptance_length) FILTER (WHERE r.loop_detected)                      AS looped_acceptance_length,
    count(*) FILTER (WHERE r.loop_detected)                                      AS loop_runs,
    median(r.repetition_ratio)                                                   AS repetition_ratio,
    median(r.prompt_repetition_ratio)                                            AS prompt_repetition_ratio,
    string_agg(DISTINCT r.skip_reason, '; ')                                     AS skip_reason
FROM runs r
LEFT JOIN round_lists b USING (arm, depth)
GROUP BY r.arm, r.depth, b.round_decodes, b.trend_round_decodes
ORDER BY r.arm, r.depth;
