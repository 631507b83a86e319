-- One series' points, oldest first, with what names the series, whether the run's checks flagged it (a hint)
-- and the alerts whose first-bad run it is.
SELECT p.run_id, p.arm, p.started_at, p.vllm_version, p.decode_tok_s_median, p.mean_acceptance_length,
       p.regression_flagged, p.model, p.method, p.k, p.load_level, p.prompt_class, p.prompt_tokens, p.max_tokens,
       p.host_class,
       string_agg(DISTINCT '#' || a.alert_id || ' ' || a.state, ', ') AS alerts
FROM series_points p
LEFT JOIN alerts a ON a.first_run_id = p.run_id AND a.candidate_arm = p.arm
WHERE p.series_key = $series_key
GROUP BY ALL
ORDER BY p.started_at;
