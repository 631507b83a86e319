-- The client's self-check per cell (CellResult.client, specwatch/bench/selfcheck.py): how many
-- worker processes and which transport drove the cell, and how late the client itself was.
-- NULL for cells measured before the self-check existed.
ALTER TABLE cells ADD COLUMN client_workers INTEGER;
ALTER TABLE cells ADD COLUMN client_transport VARCHAR;
ALTER TABLE cells ADD COLUMN client_loop_lag_ms_p50 DOUBLE;
ALTER TABLE cells ADD COLUMN client_loop_lag_ms_p99 DOUBLE;
ALTER TABLE cells ADD COLUMN client_loop_lag_ms_max DOUBLE;
ALTER TABLE cells ADD COLUMN client_stamp_delay_ms_p99 DOUBLE;
ALTER TABLE cells ADD COLUMN client_cpu_share_max DOUBLE;
ALTER TABLE cells ADD COLUMN client_send_lateness_ms_p99 DOUBLE;
