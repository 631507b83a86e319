-- One cell key everywhere: the `cell` column holds CellKey.id (specwatch/records.py), e.g.
-- 'closed/c4/code/p128': a load mode (closed loop or request rate), a concurrency or a rate,
-- a prompt class and a prompt length (a context sweep's depth). Tables join on
-- (run_id, arm, block, cell). Rows written before this migration are all closed-loop cells
-- and are carried over with their key.

CREATE TABLE cells_v4 (
    run_id                  VARCHAR NOT NULL,
    arm                     VARCHAR NOT NULL,
    block                   INTEGER NOT NULL,
    cell                    VARCHAR NOT NULL,
    load_mode               VARCHAR NOT NULL,
    concurrency             INTEGER,
    request_rate            DOUBLE,
    prompt_class            VARCHAR NOT NULL,
    prompt_tokens           INTEGER NOT NULL,
    max_tokens              INTEGER,
    wall_s                  DOUBLE,
    requests_ok             INTEGER,
    requests_failed         INTEGER,
    completion_tokens       BIGINT,
    decode_tok_s_median     DOUBLE,
    decode_tok_s_p10        DOUBLE,
    decode_tok_s_p90        DOUBLE,
    ttft_s_median           DOUBLE,
    ttft_s_p90              DOUBLE,
    tpot_ms_median          DOUBLE,
    e2e_s_median            DOUBLE,
    aggregate_tok_s         DOUBLE,
    server_aggregate_tok_s  DOUBLE,
    mean_acceptance_length  DOUBLE,
    draft_acceptance_rate   DOUBLE,
    num_drafts              DOUBLE,
    num_draft_tokens        DOUBLE,
    num_accepted_tokens     DOUBLE,
    generation_tokens       DOUBLE,
    server_prompt_tokens    DOUBLE,
    prefix_cache_hits       DOUBLE,
    prefix_cache_queries    DOUBLE,
    prefix_cache_hit_rate   DOUBLE,
    max_running_observed    INTEGER,
    repetition_ratio_median DOUBLE,
    rejected                BOOLEAN NOT NULL,
    reject_reason           VARCHAR,
    flags                   VARCHAR[],
    PRIMARY KEY (run_id, arm, block, cell)
);
INSERT INTO cells_v4 BY NAME
SELECT *, 'closed/c' || concurrency || '/' || prompt_class || '/p' || prompt_tokens AS cell,
       'closed' AS load_mode, NULL::DOUBLE AS request_rate
FROM cells;
DROP TABLE cells;
ALTER TABLE cells_v4 RENAME TO cells;

CREATE TABLE spec_positions_v4 (
    run_id     VARCHAR NOT NULL,
    arm        VARCHAR NOT NULL,
    block      INTEGER NOT NULL,
    cell       VARCHAR NOT NULL,
    position   INTEGER NOT NULL,
    accepted   DOUBLE,
    acceptance DOUBLE,
    PRIMARY KEY (run_id, arm, block, cell, position)
);
INSERT INTO spec_positions_v4
SELECT p.run_id, p.arm, p.block, c.cell, p.position, p.accepted, p.acceptance
FROM spec_positions p
JOIN cells c USING (run_id, arm, block, concurrency, prompt_class);
DROP TABLE spec_positions;
ALTER TABLE spec_positions_v4 RENAME TO spec_positions;

-- requests can hold millions of rows: add the key in place instead of copying the table
ALTER TABLE requests ADD COLUMN cell VARCHAR;
UPDATE requests r SET cell = c.cell
FROM cells c
WHERE c.run_id = r.run_id AND c.arm = r.arm AND c.block = r.block
  AND c.concurrency = r.concurrency AND c.prompt_class = r.prompt_class;
ALTER TABLE requests DROP COLUMN concurrency;
ALTER TABLE requests DROP COLUMN prompt_class;

-- quality rows keep concurrency and prompt_class as labels; checks over all blocks
-- (block NULL) name the cell too
ALTER TABLE quality_results ADD COLUMN cell VARCHAR;
UPDATE quality_results q SET cell = c.cell
FROM (SELECT DISTINCT run_id, arm, cell, concurrency, prompt_class FROM cells) c
WHERE c.run_id = q.run_id AND c.arm = q.arm AND c.concurrency = q.concurrency
  AND c.prompt_class = q.prompt_class;
