INSERT INTO schema_migrations (version, name) VALUES ($version, $name);
