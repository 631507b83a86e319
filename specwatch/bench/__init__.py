"""The load generator: it knows an OpenAI-compatible base URL, /tokenize and /metrics, and never
how the server was started. Imports stay light (no Prefect, scipy or pandas): `specwatch bench`
and the benchmark worker processes pay only for what they use.
"""
