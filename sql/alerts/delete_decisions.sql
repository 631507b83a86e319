-- A run's decisions recorded again (a re-run of its checks) replace the earlier ones.
DELETE FROM decisions WHERE run_id = $run_id AND candidate_arm = $candidate_arm;
