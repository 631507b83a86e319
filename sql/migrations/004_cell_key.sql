-- One cell key everywhere: the `cell` column holds CellKey.id (specwatch/records.py), e.g.
-- 'closed/c4/code/p128': a load mode (closed loop or request rate), a concurrency or a rate,
-- a prompt class and a prompt length (a context sweep's depth). Tables join on
-- (run_id, arm, block, cell). Rows written before this migration are all closed-loop cells
-- and are carried over with their key.

-- Copied, then constrained: the columns keep their types and order, the key is new.
CREATE TABLE cells_v4 AS
SELECT run_id, arm, block,
       'closed/c' || concurrency || '/' || prompt_class || '/p' || prompt_tokens AS cell,
       'closed' AS load_mode, concurrency, NULL::DOUBLE AS request_rate,
       * EXCLUDE (run_id, arm, block, concurrency)
FROM cells;
ALTER TABLE cells_v4 ADD PRIMARY KEY (run_id, arm, block, cell);
ALTER TABLE cells_v4 ALTER COLUMN load_mode SET NOT NULL;
ALTER TABLE cells_v4 ALTER COLUMN prompt_class SET NOT NULL;
ALTER TABLE cells_v4 ALTER COLUMN rejected SET NOT NULL;
DROP TABLE cells;
ALTER TABLE cells_v4 RENAME TO cells;

CREATE TABLE spec_positions_v4 AS
SELECT p.run_id, p.arm, p.block, c.cell, p.position, p.accepted, p.acceptance
FROM spec_positions p
JOIN cells c USING (run_id, arm, block, concurrency, prompt_class);
ALTER TABLE spec_positions_v4 ADD PRIMARY KEY (run_id, arm, block, cell, position);
DROP TABLE spec_positions;
ALTER TABLE spec_positions_v4 RENAME TO spec_positions;

-- requests can hold millions of rows: add the key in place instead of copying the table
ALTER TABLE requests ADD COLUMN cell VARCHAR;
UPDATE requests r SET cell = c.cell
FROM cells c
WHERE c.run_id = r.run_id AND c.arm = r.arm AND c.block = r.block
  AND c.concurrency = r.concurrency AND c.prompt_class = r.prompt_class;
ALTER TABLE requests DROP COLUMN concurrency;
ALTER TABLE requests DROP COLUMN prompt_class;

-- quality rows keep concurrency and prompt_class as labels; checks over all blocks
-- (block NULL) name the cell too
ALTER TABLE quality_results ADD COLUMN cell VARCHAR;
UPDATE quality_results q SET cell = c.cell
FROM (SELECT DISTINCT run_id, arm, cell, concurrency, prompt_class FROM cells) c
WHERE c.run_id = q.run_id AND c.arm = q.arm AND c.concurrency = q.concurrency
  AND c.prompt_class = q.prompt_class;
