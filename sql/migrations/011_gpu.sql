-- The GPU path (issue 11): memory per GPU in a run's host facts; a launch's batch and memory
-- limits as its command line set them (a GPU platform always sets both; NULL = the build's default).
ALTER TABLE runs ADD COLUMN gpu_memory_mib DOUBLE;
ALTER TABLE arms ADD COLUMN gpu_memory_utilization DOUBLE;
ALTER TABLE arms ADD COLUMN max_num_seqs INTEGER;
