INSERT INTO schema_views (name, sha256) VALUES ($name, $sha256);
