-- Interference (issue 33): what the host did besides the run over each cell's window, and the launches run
-- again because of it. The figures a check or a chart reads (foreign CPU share, steal, CPU pressure, the GPU's
-- foreign memory and clock ratio) are catalogue metrics in cell_metrics; `host` keeps the whole record
-- (the busiest foreign processes, the throttle reasons) as JSON, so that `specwatch report` rebuilds it.
ALTER TABLE cells ADD COLUMN opened_at DOUBLE;         -- Unix time the cell's window opened
ALTER TABLE cells ADD COLUMN host VARCHAR;             -- records.HostLoad as JSON; NULL: not sampled
ALTER TABLE cells ADD COLUMN contaminated VARCHAR;     -- why the host was too busy for the cell to count

-- One row per launch that was measured on a busy host and run again in its round; `launch` is the
-- ArmResult as measured (JSON), none of whose figures is read.
CREATE TABLE redos (
    run_id     VARCHAR NOT NULL,
    seq        INTEGER NOT NULL,  -- the order the redos happened in within the run
    arm        VARCHAR NOT NULL,
    round      INTEGER NOT NULL,
    reason     VARCHAR NOT NULL,
    started_at TIMESTAMPTZ NOT NULL,
    ended_at   TIMESTAMPTZ NOT NULL,
    launch     VARCHAR NOT NULL,
    PRIMARY KEY (run_id, seq)
);

-- Where the client measured from (design.cpu_share: cores); NULL: not pinned (nice, a GPU, a remote server).
ALTER TABLE arms ADD COLUMN client_cores INTEGER[];
