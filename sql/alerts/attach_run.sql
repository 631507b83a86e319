-- Another decided run shows the same change: counted once per run.
UPDATE alerts SET last_run_id = $run_id, runs = runs + 1, updated_at = $at
WHERE alert_id = $alert_id AND last_run_id <> $run_id;
