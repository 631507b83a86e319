-- A run's cells per arm: the median over its rounds of the headline figures.
SELECT arm, any_value(k) AS k, any_value(vllm_version) AS vllm_version, concurrency, prompt_class,
       count(*) AS rounds, median(decode_tok_s_median) AS decode_tok_s, median(mean_acceptance_length) AS mal,
       bool_or(rejected) AS rejected
FROM cell_results
WHERE run_id = $run_id
GROUP BY arm, concurrency, prompt_class
ORDER BY arm, concurrency, prompt_class;
