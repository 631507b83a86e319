SELECT version FROM schema_migrations;
