"""Store: DuckDB and its migrations, run dirs (results.json), ingest, the GE checks, named queries, history."""
