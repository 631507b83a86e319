-- Common random numbers (issue 22): the arms of a round send the same prompts, so each request's output
-- can be compared across arms. requests.output_sha256: sha256 of the output text, 16 hex digits; NULL for
-- a request that did not finish, and for every request of a run ingested before (never hashed).
ALTER TABLE requests ADD COLUMN IF NOT EXISTS output_sha256 VARCHAR;
