-- One row per cell of the run (rejected cells included: impossible counters in a rejected
-- cell still point at a harness bug) holding the figures the sanity suite bounds.
-- row_id lets Great Expectations name the failing cells (unexpected_index_column_names).
WITH pos AS (
    SELECT
        arm, round, cell, position, acceptance,
        acceptance - lag(acceptance) OVER (
            PARTITION BY arm, round, cell ORDER BY position
        ) AS rise
    FROM spec_positions
    WHERE run_id = $run_id
),
pos_cell AS (
    SELECT
        arm, round, cell,
        min(acceptance)          AS acceptance_pos_min,
        max(acceptance)          AS acceptance_pos_max,
        -- acceptance at position i+1 can never exceed position i (a draft token is only
        -- accepted after all before it were): the largest rise should be <= 0
        max(rise)                AS acceptance_pos_max_rise,
        arg_max(position, rise)  AS acceptance_pos_rise_at
    FROM pos
    GROUP BY arm, round, cell
)
SELECT
    (row_number() OVER (ORDER BY c.arm, c.round, c.concurrency, c.prompt_class, c.cell) - 1)::BIGINT AS row_id,
    c.arm,
    c.round,
    c.cell,
    c.concurrency,
    c.prompt_class,
    c.rejected,
    c.draft_acceptance_rate,
    p.acceptance_pos_min,
    p.acceptance_pos_max,
    p.acceptance_pos_max_rise,
    p.acceptance_pos_rise_at,
    c.requests_failed::DOUBLE AS requests_failed,
    -- cells that share prefixes on purpose (multi-turn, nonce off) report their hit rate, ungated
    CASE WHEN c.prefix_cache_gate THEN c.prefix_cache_hit_rate END AS prefix_cache_hit_rate
FROM cells c
LEFT JOIN pos_cell p USING (arm, round, cell)
WHERE c.run_id = $run_id
ORDER BY row_id;
