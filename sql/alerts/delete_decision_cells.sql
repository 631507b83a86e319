DELETE FROM decision_cells WHERE run_id = $run_id AND candidate_arm = $candidate_arm;
