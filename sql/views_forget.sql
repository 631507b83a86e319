DELETE FROM schema_views;
