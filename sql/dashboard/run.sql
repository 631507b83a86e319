SELECT run_id, experiment_name, started_at, ended_at, exit_code, partial FROM runs WHERE run_id = $run_id;
