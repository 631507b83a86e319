-- Which text of each sql/views/ file a database holds, so an open can tell whether its views are
-- current (a read-only one too) without re-creating them.
CREATE TABLE IF NOT EXISTS schema_views (
    name       VARCHAR PRIMARY KEY,
    sha256     VARCHAR NOT NULL,
    applied_at TIMESTAMPTZ DEFAULT current_timestamp
);
