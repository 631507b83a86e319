-- Alerts people act on (issue 25). An alert opens on a decided change only: an A/B that decided REVERT
-- (or PROMOTE, an improvement notice) for a candidate arm; a single run's GE flag is a hint, not an alert.
--
-- decisions: what each decided A/B said per candidate arm, on its comparison series (the experiment's
-- name with the candidate and baseline arms: what the nightly compares night after night). The streak of
-- same-direction decisions on a series finds a change's first-bad run; the next decided comparison checks
-- a fixed alert. decision_cells: the per-cell intervals behind it (the dashboard's compare view).
CREATE TABLE decisions (
    run_id        VARCHAR NOT NULL,
    series        VARCHAR NOT NULL,
    baseline_arm  VARCHAR NOT NULL,
    candidate_arm VARCHAR NOT NULL,
    outcome       VARCHAR NOT NULL,  -- PROMOTE, REVERT, NO CHANGE, INCONCLUSIVE
    metric        VARCHAR NOT NULL,  -- the lead metric; estimate/low/high in its own direction
    estimate      DOUBLE,
    low           DOUBLE,
    high          DOUBLE,
    rounds        INTEGER NOT NULL,
    reason        VARCHAR NOT NULL,
    started_at    TIMESTAMPTZ NOT NULL,  -- the run's start: the order along the series
    decided_at    TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (run_id, candidate_arm)
);

CREATE TABLE decision_cells (
    run_id        VARCHAR NOT NULL,
    candidate_arm VARCHAR NOT NULL,
    cell          VARCHAR NOT NULL,  -- CellKey.id
    label         VARCHAR NOT NULL,  -- CellKey.label
    metric        VARCHAR NOT NULL,
    outcome       VARCHAR NOT NULL,  -- gain, regression, flat, inconclusive
    before_value  DOUBLE,            -- the baseline arm's median over rounds
    after_value   DOUBLE,            -- the candidate's
    estimate      DOUBLE,
    low           DOUBLE,
    high          DOUBLE,
    PRIMARY KEY (run_id, candidate_arm, cell, metric)
);

CREATE SEQUENCE alert_ids START 1;

-- One alert per change: the same series, direction and first-bad run is the same change, whatever the
-- number of runs, cells or metrics that show it.
CREATE TABLE alerts (
    alert_id      INTEGER PRIMARY KEY DEFAULT nextval('alert_ids'),
    series        VARCHAR NOT NULL,
    direction     VARCHAR NOT NULL,  -- regression, improvement
    first_run_id  VARCHAR NOT NULL,  -- the first run that shows it
    first_started_at TIMESTAMPTZ NOT NULL,  -- that run's start
    last_run_id   VARCHAR NOT NULL,  -- the latest decided run that showed it
    runs          INTEGER NOT NULL,  -- decided runs that showed it
    source        VARCHAR NOT NULL,  -- 'a/b', or 'change point + a/b' when a history change point places it
    baseline_arm  VARCHAR NOT NULL,
    candidate_arm VARCHAR NOT NULL,
    metric        VARCHAR NOT NULL,
    before_value  DOUBLE,
    after_value   DOUBLE,
    effect        DOUBLE,            -- relative, in the metric's own direction, with its interval
    effect_low    DOUBLE,
    effect_high   DOUBLE,
    cells         VARCHAR NOT NULL,  -- the grouped cells and metrics, '; '-separated
    summary       VARCHAR NOT NULL,  -- one line, what a notification carries
    state         VARCHAR NOT NULL,  -- untriaged, acknowledged, invalid, fixed, verified, wontfix
    opened_at     TIMESTAMPTZ NOT NULL,
    updated_at    TIMESTAMPTZ NOT NULL,
    UNIQUE (series, direction, first_run_id)
);

-- Every change of state: who, when, and why (a person's note, or what the next comparison showed).
CREATE TABLE alert_events (
    alert_id   INTEGER NOT NULL,
    state      VARCHAR NOT NULL,
    changed_by VARCHAR NOT NULL,
    changed_at TIMESTAMPTZ NOT NULL,
    note       VARCHAR
);

CREATE SEQUENCE notification_ids START 1;

-- Every notification is written here first and sent from here; a target that is down leaves it pending
-- for the next flow run, with its attempts counted. No target URL is stored (it may hold a token).
CREATE TABLE outbox (
    notification_id INTEGER PRIMARY KEY DEFAULT nextval('notification_ids'),
    alert_id        INTEGER,           -- NULL: a run's regression hint (history check), not an alert
    event           VARCHAR NOT NULL,  -- opened, reopened, verified, hint
    summary         VARCHAR NOT NULL,
    links           VARCHAR NOT NULL,  -- JSON object: name -> URL or path
    created_at      TIMESTAMPTZ NOT NULL,
    attempts        INTEGER NOT NULL DEFAULT 0,
    last_attempt_at TIMESTAMPTZ,
    last_error      VARCHAR,           -- redacted
    sent_at         TIMESTAMPTZ,
    sent_to         VARCHAR            -- the target's name (a Prefect block, or the URL's redacted form)
);
