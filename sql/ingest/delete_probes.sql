DELETE FROM probes WHERE run_id = $run_id;
