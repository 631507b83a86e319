-- One metric catalogue (specwatch/analysis/metrics.py): each cell's catalogue metrics as rows, one per
-- (cell, metric), written at ingest by iterating the catalogue, so a new metric needs no column. The delta
-- checks (sql/checks/*_deltas.sql) read this table. A metric missing from a cell (a p99 under 100
-- requests, goodput without an SLO) has no row. No primary key, as for `requests`: ingest replaces a
-- run's rows in one transaction.
CREATE TABLE cell_metrics (
    run_id VARCHAR NOT NULL,
    arm    VARCHAR NOT NULL,
    block  INTEGER NOT NULL,
    cell   VARCHAR NOT NULL,
    metric VARCHAR NOT NULL,
    value  DOUBLE NOT NULL
);

-- Runs ingested before: the catalogue's metrics as their columns hold them (UNPIVOT leaves NULLs out),
-- and, as ingest does, no acceptance figure of a cell that fell into a repetition loop.
INSERT INTO cell_metrics
SELECT run_id, arm, block, cell, metric, value
FROM (
    UNPIVOT (
        SELECT run_id, arm, block, cell, decode_tok_s_median, aggregate_tok_s, ttft_s_median, tpot_ms_median,
               ttft_ms_p50, ttft_ms_p99, tpot_ms_p50, tpot_ms_p99, itl_ms_p50, itl_ms_p99, e2e_ms_p50, e2e_ms_p99,
               goodput_share, goodput_tok_s, kv_cache_usage_peak,
               CASE WHEN loop_detected THEN NULL ELSE mean_acceptance_length END AS mean_acceptance_length
        FROM cells
    )
    ON COLUMNS(* EXCLUDE (run_id, arm, block, cell))
    INTO NAME metric VALUE value
);
