-- A round is one launch of each arm (issue 22): the column that numbers a launch within its arm, `block`
-- until now, is `round` in every table, as in results.json (schema_version 5), the spec and the reports.
-- A rename keeps the rows, their types and the primary keys that hold the column. The views that read it
-- are re-created from sql/views/ after this migration (specwatch/store/db.py), so none is dropped here.
ALTER TABLE arms RENAME COLUMN block TO round;
ALTER TABLE cells RENAME COLUMN block TO round;
ALTER TABLE requests RENAME COLUMN block TO round;
ALTER TABLE spec_positions RENAME COLUMN block TO round;
ALTER TABLE quality_results RENAME COLUMN block TO round;
ALTER TABLE probes RENAME COLUMN block TO round;
ALTER TABLE ranks RENAME COLUMN block TO round;
ALTER TABLE cell_metrics RENAME COLUMN block TO round;

-- A run's recorded experiment file says rounds and max_rounds too (were blocks, max_blocks), so that
-- `specwatch report RUN_ID` re-reads the spec of a run stored before: a key set to NULL is removed.
UPDATE runs SET experiment = json_merge_patch(experiment, json_object('design', json_object(
    'blocks', NULL, 'rounds', json_extract(experiment, '$.design.blocks'),
    'max_blocks', NULL, 'max_rounds', json_extract(experiment, '$.design.max_blocks'))))
WHERE json_exists(experiment, '$.design.blocks') OR json_exists(experiment, '$.design.max_blocks');
