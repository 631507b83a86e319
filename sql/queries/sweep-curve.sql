-- name: sweep-curve
-- params: run=NULL, arm=NULL
-- A context-length sweep's curve: per arm and depth, the runs, median TTFT, prefill and decode
-- tok/s, and the mean acceptance length of the runs that did not loop (loop_runs counts those that
-- did: their acceptance is inflated). run: a sweep's run id (default: the latest sweep); arm: one arm.
WITH chosen AS (
    SELECT coalesce($run, (SELECT arg_max(s.run_id, r.started_at)
                           FROM sweep_results s JOIN runs r USING (run_id))) AS run_id
)
SELECT
    run_id, arm, depth,
    count(*)                                                               AS runs,
    round(median(ttft_s), 3)                                               AS ttft_s,
    round(median(prefill_tok_s), 1)                                        AS prefill_tok_s,
    round(median(decode_tok_s), 2)                                         AS decode_tok_s,
    round(avg(mean_acceptance_length) FILTER (WHERE NOT loop_detected), 3) AS mean_acceptance_length,
    count(*) FILTER (WHERE loop_detected)                                  AS loop_runs
FROM sweep_results
WHERE run_id = (SELECT run_id FROM chosen) AND ($arm IS NULL OR arm = $arm)
GROUP BY ALL
ORDER BY arm, depth;
