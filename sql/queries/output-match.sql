-- name: output-match
-- params: run_id
-- How often each arm's outputs equal the baseline's for the same prompt, per cell of run $run_id, pooled
-- over its rounds. The arms of a round send the same request ids and prompts, so a request pairs
-- with the baseline's request of the same id, round and cell; equal output hashes mean equal outputs.
-- Arms that share one server send prompts of their own and have no pairs. A mismatch is not a
-- correctness failure (batched kernels, other images and CPU builds diverge under greedy decoding
-- too): only the greedy probes judge correctness (specwatch/analysis/outputs.py, the report's figure).
WITH baseline AS (
    SELECT json_extract_string(experiment, '$.baseline') AS arm FROM runs WHERE run_id = $run_id
),
hashed AS (
    SELECT arm, round, cell, request_id, output_sha256
    FROM requests
    WHERE run_id = $run_id AND request_id IS NOT NULL AND output_sha256 IS NOT NULL
)
SELECT
    a.arm,
    a.cell,
    count(*)                                                       AS paired,
    count(*) FILTER (WHERE a.output_sha256 = b.output_sha256)      AS matched,
    round(100.0 * matched / paired, 1)                             AS match_pct
FROM hashed a
JOIN hashed b USING (round, cell, request_id)
WHERE b.arm = (SELECT arm FROM baseline) AND a.arm <> b.arm
GROUP BY a.arm, a.cell
ORDER BY a.arm, a.cell;
