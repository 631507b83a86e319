-- Per-rank provenance of multi-rank launches: where each rank ran, with what command line and
-- env (secrets redacted), and a hash of its env (equal hashes, equal env, secrets included).
CREATE TABLE ranks (
    run_id    VARCHAR NOT NULL,
    arm       VARCHAR NOT NULL,
    block     INTEGER NOT NULL,
    rank      INTEGER NOT NULL,
    role      VARCHAR NOT NULL,
    host      VARCHAR,
    address   VARCHAR,
    gpu       VARCHAR,
    env_hash  VARCHAR,
    argv      JSON,
    env       JSON,
    log_path  VARCHAR,
    PRIMARY KEY (run_id, arm, block, rank)
);
