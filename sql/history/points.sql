-- Every point of the series whose key starts with $series ('' = all), oldest first; its metric values
-- come from point_metrics.sql.
SELECT s.series_key, s.host_class, s.model, s.method, s.k, s.prompt_class, s.prompt_tokens, s.max_tokens,
       s.concurrency, s.request_rate, s.ramp_from_rate, s.load_level, p.run_id, p.arm, p.started_at, p.vllm_version
FROM series s
JOIN series_points p USING (series_key)
WHERE starts_with(s.series_key, $series)
ORDER BY s.series_key, p.started_at;
