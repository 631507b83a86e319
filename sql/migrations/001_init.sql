-- Core schema: one row per run, arm launch (block), cell, request and speculative position.
-- Per-cell aggregates are stored at ingest so views never recompute medians over raw requests.

CREATE TABLE runs (
    run_id                   VARCHAR PRIMARY KEY,
    flow_run_id              VARCHAR,
    experiment_name          VARCHAR NOT NULL,
    experiment               JSON,
    experiment_file          VARCHAR,
    experiment_sha256        VARCHAR,
    specwatch_version        VARCHAR,
    hostname                 VARCHAR,
    cpu_model                VARCHAR,
    cpu_count                INTEGER,
    gpu_model                VARCHAR,
    gpu_count                INTEGER,
    gpu_driver               VARCHAR,
    checkpoint_path          VARCHAR,
    checkpoint_config_sha256 VARCHAR,
    checkpoint_index_sha256  VARCHAR,
    sampling                 JSON,
    exit_code                INTEGER,
    started_at               TIMESTAMPTZ,
    ended_at                 TIMESTAMPTZ
);

CREATE TABLE arms (
    run_id        VARCHAR NOT NULL,
    arm           VARCHAR NOT NULL,
    block         INTEGER NOT NULL,
    image         VARCHAR,
    backend       VARCHAR,
    package       VARCHAR,
    vllm_version  VARCHAR,
    image_digest  VARCHAR,
    method        VARCHAR,
    k             INTEGER,
    k_confirmed   INTEGER,
    k_source      VARCHAR,
    status        VARCHAR NOT NULL,
    reason        VARCHAR,
    launcher      VARCHAR,
    base_url      VARCHAR,
    launch_argv   JSON,
    launch_env    JSON,
    log_path      VARCHAR,
    boot_s        DOUBLE,
    started_at    TIMESTAMPTZ,
    ended_at      TIMESTAMPTZ,
    PRIMARY KEY (run_id, arm, block)
);

CREATE TABLE cells (
    run_id                 VARCHAR NOT NULL,
    arm                    VARCHAR NOT NULL,
    block                  INTEGER NOT NULL,
    concurrency            INTEGER NOT NULL,
    prompt_class           VARCHAR NOT NULL,
    prompt_tokens          INTEGER,
    max_tokens             INTEGER,
    wall_s                 DOUBLE,
    requests_ok            INTEGER,
    requests_failed        INTEGER,
    completion_tokens      BIGINT,
    decode_tok_s_median    DOUBLE,
    decode_tok_s_p10       DOUBLE,
    decode_tok_s_p90       DOUBLE,
    ttft_s_median          DOUBLE,
    ttft_s_p90             DOUBLE,
    tpot_ms_median         DOUBLE,
    e2e_s_median           DOUBLE,
    aggregate_tok_s        DOUBLE,
    server_aggregate_tok_s DOUBLE,
    mean_acceptance_length DOUBLE,
    draft_acceptance_rate  DOUBLE,
    num_drafts             DOUBLE,
    num_draft_tokens       DOUBLE,
    num_accepted_tokens    DOUBLE,
    generation_tokens      DOUBLE,
    server_prompt_tokens   DOUBLE,
    prefix_cache_hits      DOUBLE,
    prefix_cache_queries   DOUBLE,
    prefix_cache_hit_rate  DOUBLE,
    max_running_observed   INTEGER,
    repetition_ratio_median DOUBLE,
    rejected               BOOLEAN NOT NULL,
    reject_reason          VARCHAR,
    flags                  VARCHAR[],
    PRIMARY KEY (run_id, arm, block, concurrency, prompt_class)
);

-- No primary key: history grows to millions of rows and the ART index would slow bulk ingest;
-- ingest replaces a run's rows in one transaction instead.
CREATE TABLE requests (
    run_id            VARCHAR NOT NULL,
    arm               VARCHAR NOT NULL,
    block             INTEGER NOT NULL,
    concurrency       INTEGER NOT NULL,
    prompt_class      VARCHAR NOT NULL,
    idx               INTEGER NOT NULL,
    status            VARCHAR NOT NULL,
    error             VARCHAR,
    prompt_tokens     INTEGER,
    completion_tokens INTEGER,
    chunks            INTEGER,
    started_s         DOUBLE,
    ttft_s            DOUBLE,
    e2e_s             DOUBLE,
    decode_s          DOUBLE,
    arrival_groups    INTEGER,
    decode_tok_s      DOUBLE,
    repetition_ratio  DOUBLE
);

CREATE TABLE spec_positions (
    run_id       VARCHAR NOT NULL,
    arm          VARCHAR NOT NULL,
    block        INTEGER NOT NULL,
    concurrency  INTEGER NOT NULL,
    prompt_class VARCHAR NOT NULL,
    position     INTEGER NOT NULL,
    accepted     DOUBLE,
    acceptance   DOUBLE,
    PRIMARY KEY (run_id, arm, block, concurrency, prompt_class, position)
);

CREATE TABLE quality_results (
    run_id         VARCHAR NOT NULL,
    arm            VARCHAR NOT NULL,
    block          INTEGER,
    concurrency    INTEGER,
    prompt_class   VARCHAR,
    check_name     VARCHAR NOT NULL,
    metric         VARCHAR NOT NULL,
    value          DOUBLE,
    baseline_value DOUBLE,
    threshold      DOUBLE,
    passed         BOOLEAN NOT NULL,
    severity       VARCHAR NOT NULL,
    detail         VARCHAR,
    created_at     TIMESTAMPTZ DEFAULT current_timestamp
);

-- The view over these tables (cell_results) was created here until issue 20: views live in
-- sql/views/ and db.migrate re-creates them after the migrations.
