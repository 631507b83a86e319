-- Every history series with its latest point and its open alerts (an alert marks the series of its
-- candidate arm's first-bad run).
WITH marked AS (
    SELECT p.series_key, count(DISTINCT a.alert_id) AS open_alerts
    FROM alerts a
    JOIN series_points p ON p.run_id = a.first_run_id AND p.arm = a.candidate_arm
    WHERE a.state NOT IN ('invalid', 'verified', 'wontfix')
    GROUP BY p.series_key
)
SELECT s.series_key, s.model, s.method, s.k, s.load_level, s.prompt_class, s.prompt_tokens, s.max_tokens,
       s.host_class, s.runs, s.last_at, s.last_vllm_version, s.last_decode_tok_s, s.last_mean_acceptance_length,
       coalesce(m.open_alerts, 0) AS open_alerts
FROM series s
LEFT JOIN marked m USING (series_key)
ORDER BY open_alerts DESC, s.model, s.method, s.k, s.load_level, s.prompt_class;
