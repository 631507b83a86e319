-- The compare view: baseline vs candidate per cell, with the decision's interval.
SELECT candidate_arm, cell, label, metric, outcome, before_value, after_value, estimate, low, high
FROM decision_cells WHERE run_id = $run_id ORDER BY candidate_arm, metric, cell;
