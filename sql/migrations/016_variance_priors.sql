-- A launch variance learned before the run (issue 22, deliverable 4): what an A/A calibration
-- (`specwatch calibrate`) measured, per cell and judged metric, as the sd of the per-round log-ratio
-- between its two slots and its degrees of freedom (rounds - 1). The composite (the per-round mean over
-- the judged cells) has its own row, cell 'composite' (sequential.COMPOSITE), listing the cells it averages
-- in composite_of: its variance includes the cells' covariance, which the cells' rows do not give.
--
-- Keyed by what makes a variance comparable between runs (specwatch/store/priors.py, VarianceKey):
-- platform, the CPU or GPU model and count, the image digest, the model hash. Not the hostname: GPU
-- hosts are fresh machines. One calibration run writes its rows once; calibrating again with that run
-- id replaces them.
CREATE TABLE variance_priors (
    platform       VARCHAR NOT NULL,  -- specwatch.engine.platforms: cpu, gpu, unknown (an endpoint)
    hardware       VARCHAR NOT NULL,  -- the CPU model (cpu, unknown) or the GPU model (gpu)
    hardware_count INTEGER NOT NULL,  -- CPU cores or GPUs
    image          VARCHAR NOT NULL,  -- the calibrated arm's image digest (an endpoint: its URL)
    model          VARCHAR NOT NULL,  -- checkpoint config sha256, '+gguf:<sha256>' when packaged
    cell           VARCHAR NOT NULL,  -- CellKey.id, or 'composite'
    metric         VARCHAR NOT NULL,  -- a judged metric's name (what verdict.metrics names)
    sd             DOUBLE NOT NULL,
    df             INTEGER NOT NULL,
    composite_of   VARCHAR,           -- 'composite' rows: the averaged cell ids, sorted, space-separated
    run_id         VARCHAR NOT NULL,
    arm            VARCHAR NOT NULL,  -- the arm that ran in every slot
    measured_at    TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (run_id, cell, metric)
);
