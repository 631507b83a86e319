-- The run's failed regression checks: hints shown beside the decision.
SELECT arm, concurrency, prompt_class, "check", detail FROM regressions WHERE run_id = $run_id
ORDER BY "check", arm, concurrency, prompt_class;
