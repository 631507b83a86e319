-- Every pair of sides of one comparison, with the deltas: *_delta_pct = 100 * (b / a - 1).
CREATE OR REPLACE VIEW comparisons AS
SELECT
    a.axis, a.side AS side_a, b.side AS side_b,
    a.model, a.method, a.k, a.vllm_version, a.concurrency, a.load_mode, a.load_level, a.request_rate,
    a.ramp_from_rate, a.arrival, a.burstiness, a.prompt_class, a.prompt_tokens, a.max_tokens,
    a.host_class,
    a.runs                                                                    AS runs_a,
    b.runs                                                                    AS runs_b,
    round(a.decode_tok_s, 2)                                                  AS decode_tok_s_a,
    round(b.decode_tok_s, 2)                                                  AS decode_tok_s_b,
    round(100 * (b.decode_tok_s / a.decode_tok_s - 1), 2)                     AS decode_delta_pct,
    round(a.mean_acceptance_length, 3)                                        AS mean_acceptance_length_a,
    round(b.mean_acceptance_length, 3)                                        AS mean_acceptance_length_b,
    round(100 * (b.mean_acceptance_length / a.mean_acceptance_length - 1), 2) AS acceptance_delta_pct,
    a.series_key
FROM comparable_points a
JOIN comparable_points b ON b.axis = a.axis AND b.pair_key = a.pair_key AND b.side <> a.side;
