-- name: acceptance-trend
-- params: method=NULL, k=NULL, model=NULL, concurrency=NULL, load_level=NULL, prompt_class=NULL, series=NULL, since=NULL
-- Mean acceptance length and decode tok/s over time, one row per run (and arm) of each
-- series, oldest first within a series. Each point is the median over the arm's
-- rounds; *_change_pct compares it with the series' previous point and *_median_7 is the
-- median of the last 7 points (a trend that one noisy night does not move). A series is one
-- model + checkpoint, method, k, workload and host class; the vLLM version changes along it.
-- regression_flagged marks runs with a failed regression check. Optional filters (default:
-- all): method, k, model, concurrency, load_level (c4, r2.5 or r1to8: closed-loop or rate
-- cells, as in the cell id), prompt_class, series (a series_key or a prefix of
-- it), since (a date or timestamp, e.g. 2026-01-01: hides older points, but the changes
-- and 7-point medians of the points shown still count the older ones).
WITH point AS (
    -- every filter but since selects whole series; since only hides points (below)
    SELECT *
    FROM series_points
    WHERE ($method IS NULL OR method = $method)
      AND ($k IS NULL OR k = CAST($k AS INTEGER))
      AND ($model IS NULL OR model = $model)
      AND ($concurrency IS NULL OR concurrency = CAST($concurrency AS INTEGER))
      AND ($load_level IS NULL OR load_level = $load_level)
      AND ($prompt_class IS NULL OR prompt_class = $prompt_class)
      AND ($series IS NULL OR starts_with(series_key, $series))
),
trend AS (
    SELECT
        -- the series, as `series` names it
        model, method, k, concurrency, load_level, arrival, burstiness, prompt_class, prompt_tokens, max_tokens,
        host_class,
        started_at,
        vllm_version,
        run_id,
        arm,
        rounds,
        round(mean_acceptance_length, 3)                               AS mean_acceptance_length,
        round(100 * (mean_acceptance_length / lag(mean_acceptance_length) OVER w - 1), 2)
                                                                       AS acceptance_change_pct,
        round(median(mean_acceptance_length) OVER w7, 3)               AS acceptance_median_7,
        round(decode_tok_s_median, 2)                                  AS decode_tok_s,
        round(100 * (decode_tok_s_median / lag(decode_tok_s_median) OVER w - 1), 2)
                                                                       AS decode_change_pct,
        round(median(decode_tok_s_median) OVER w7, 2)                  AS decode_tok_s_median_7,
        regression_flagged,
        series_key
    FROM point
    WINDOW
        w  AS (PARTITION BY series_key ORDER BY started_at, run_id, arm),
        w7 AS (PARTITION BY series_key ORDER BY started_at, run_id, arm ROWS BETWEEN 6 PRECEDING AND CURRENT ROW)
)
SELECT *
FROM trend
WHERE $since IS NULL OR started_at >= CAST($since AS TIMESTAMPTZ)
ORDER BY model, method, k, load_level, concurrency, prompt_class, prompt_tokens, max_tokens, host_class, series_key,
         started_at, run_id, arm;
