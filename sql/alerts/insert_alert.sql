INSERT INTO alerts (series, direction, first_run_id, first_started_at, last_run_id, runs, source, baseline_arm,
                    candidate_arm, metric, before_value, after_value, effect, effect_low, effect_high, cells, summary,
                    state, opened_at, updated_at)
VALUES ($series, $direction, $first_run_id, $first_started_at, $last_run_id, 1, $source, $baseline_arm,
        $candidate_arm, $metric, $before_value, $after_value, $effect, $effect_low, $effect_high, $cells, $summary,
        'untriaged', $at, $at)
RETURNING alert_id;
