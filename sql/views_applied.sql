SELECT name, sha256 FROM schema_views;
