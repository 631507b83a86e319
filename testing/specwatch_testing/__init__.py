"""Test doubles shared by specwatch's tests and benchmarks: a fake vLLM server that knows its own
truth, a helper that runs it as a real subprocess, and plain records for whole runs.
Not part of the engine; installed beside it by `make install`.
"""
