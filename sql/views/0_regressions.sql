-- Failed regression checks. delta_pct is in percent: 100 * (value / baseline_value - 1).
-- round is NULL for a check over all rounds; image/vllm_version/method are the arm's.
CREATE OR REPLACE VIEW regressions AS
WITH arm_info AS (
    SELECT run_id, arm,
           any_value(image) AS image, any_value(vllm_version) AS vllm_version,
           any_value(method) AS method
    FROM arms
    GROUP BY run_id, arm
)
SELECT
    q.run_id,
    q.arm,
    q.concurrency,
    q.prompt_class,
    q.metric,
    q.baseline_value,
    q.value,
    CASE WHEN q.baseline_value > 0 THEN 100 * (q.value / q.baseline_value - 1) END AS delta_pct,
    q.check_name                                    AS "check",
    q.created_at,
    q.round,
    q.threshold,
    q.detail,
    a.image,
    a.vllm_version,
    a.method,
    r.started_at                                    AS run_started_at
FROM quality_results q
LEFT JOIN arm_info a USING (run_id, arm)
LEFT JOIN runs r USING (run_id)
WHERE q.severity = 'regression' AND NOT q.passed;
