-- Bisects (issue 24, `specwatch bisect`): which version of an ordered list of images changed a metric. One
-- row per bisect, rewritten after every step (so a bisect stopped midway keeps what it measured), and one
-- row per step: an A/B whose run is in `runs` like any other (run_id), with the decision the search read.
CREATE TABLE bisects (
    bisect_id       VARCHAR PRIMARY KEY,
    name            VARCHAR NOT NULL,
    metric          VARCHAR NOT NULL,
    cells           VARCHAR NOT NULL,     -- the named cells, '; '-separated (`c=1 prose`)
    images          VARCHAR NOT NULL,     -- image names, oldest first, ' '-separated
    versions        VARCHAR NOT NULL,     -- their versions, in the same order
    family_error    DOUBLE NOT NULL,      -- the bound on any wrong call of the whole bisect
    max_steps       INTEGER NOT NULL,     -- the most A/Bs it may run
    step_alpha      DOUBLE NOT NULL,      -- family_error / (1.5 * max_steps)
    status          VARCHAR NOT NULL,     -- running, done, stopped (endpoints not apart), error
    headline        VARCHAR NOT NULL,
    culprits        VARCHAR,              -- the verified culprits, '; '-separated
    skipped         VARCHAR,              -- images that did not build or boot, ' '-separated
    notes           VARCHAR,
    launches        INTEGER NOT NULL,
    wall_s          DOUBLE NOT NULL,
    started_at      TIMESTAMPTZ NOT NULL,
    ended_at        TIMESTAMPTZ,
    flow_run_id     VARCHAR
);

CREATE TABLE bisect_steps (
    bisect_id       VARCHAR NOT NULL,
    step            INTEGER NOT NULL,     -- 1, 2, ... in the order run
    kind            VARCHAR NOT NULL,     -- endpoints, step, verify
    older           VARCHAR NOT NULL,     -- the baseline image
    newer           VARCHAR NOT NULL,
    older_version   VARCHAR NOT NULL,
    newer_version   VARCHAR NOT NULL,
    run_id          VARCHAR NOT NULL,     -- the step's A/B in runs
    outcome         VARCHAR NOT NULL,     -- PROMOTE, REVERT, NO CHANGE, INCONCLUSIVE or FAILED
    call            VARCHAR NOT NULL,     -- gain, regression, flat, inconclusive, failed
    estimate        DOUBLE,               -- newer against older, + is better, at the deciding look
    low             DOUBLE,
    high            DOUBLE,
    rounds          INTEGER NOT NULL,
    launches        INTEGER NOT NULL,
    wall_s          DOUBLE NOT NULL,
    reason          VARCHAR,
    failed_images   VARCHAR,
    PRIMARY KEY (bisect_id, step)
);
