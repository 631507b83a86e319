SELECT candidate_arm, baseline_arm, series, outcome, metric, estimate, low, high, rounds, reason
FROM decisions WHERE run_id = $run_id ORDER BY candidate_arm;
