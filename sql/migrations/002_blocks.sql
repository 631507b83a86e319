-- Restart blocks: the k-ladder outcome per launch and the greedy probe outputs of the correctness gate.

ALTER TABLE arms ADD COLUMN k_requested INTEGER;
ALTER TABLE arms ADD COLUMN fallback_reason VARCHAR;

CREATE TABLE probes (
    run_id    VARCHAR NOT NULL,
    arm       VARCHAR NOT NULL,
    block     INTEGER NOT NULL,
    probe     INTEGER NOT NULL,
    token_ids INTEGER[] NOT NULL,
    PRIMARY KEY (run_id, arm, block, probe)
);

-- Whole provenance records, so a run can be rebuilt from the database alone.
ALTER TABLE runs ADD COLUMN checkpoint JSON;
ALTER TABLE runs ADD COLUMN host JSON;
