-- Every step of every bisect beside the bisect it belongs to: what was compared, what the A/B decided with
-- its interval (newer against older, + is better), and its cost. One row per step, in the order run.
CREATE OR REPLACE VIEW bisect_results AS
SELECT
    b.bisect_id,
    b.name,
    b.metric,
    b.cells,
    b.headline,
    s.step,
    s.kind,
    s.older,
    s.newer,
    s.older_version,
    s.newer_version,
    s.outcome,
    s.call,
    s.estimate,
    s.low,
    s.high,
    s.rounds,
    s.launches,
    s.wall_s,
    s.run_id,
    b.started_at
FROM bisects b
JOIN bisect_steps s USING (bisect_id);
