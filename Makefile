# Two commands do all set-up on a fresh machine: `make demo` and `make test`.
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
DEMO ?= examples/cpu-ngram.yaml

.PHONY: install demo lint test serve browser engine clean

install: $(STAMP)

# The test doubles (testing/: a fake vLLM server, record factories) are a distribution of their own,
# installed beside the engine so tests and benchmarks import them alike.
$(STAMP): pyproject.toml testing/pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]' -e ./testing
	touch $(STAMP)

# A regression (exit 3), a rejected cell/failed arm (exit 4) or a host too busy to measure on (exit 5) is a
# result, not a demo failure.
demo: install
	@$(BIN)/specwatch run $(DEMO); code=$$?; \
	if [ $$code -eq 0 ] || [ $$code -eq 3 ] || [ $$code -eq 4 ] || [ $$code -eq 5 ]; then exit 0; else exit $$code; fi

# The UI test drives Debian's chromium (no browser download): install it when missing.
browser:
	@command -v chromium >/dev/null 2>&1 || { apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }

lint: install
	$(BIN)/ruff check .
	$(BIN)/mypy

# What the integration tests start for real: podman serving the Docker API (each test session starts its
# own service with its own storage root), debootstrap for the local base image, a loopback registry,
# and sshd (a remote host on loopback).
engine:
	@command -v podman >/dev/null 2>&1 && command -v debootstrap >/dev/null 2>&1 && \
		command -v docker-registry >/dev/null 2>&1 && test -x /usr/sbin/sshd || { apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq podman runc debootstrap docker-registry \
		openssh-server >/dev/null; }

# Lint as `make lint` does, with mypy (~25 s cold, one core) beside the tests' first minutes rather than before
# them; ruff (a second) still fails first. A mypy error fails `make test` once the tests are done.
test: install browser engine
	$(BIN)/ruff check .
	@$(BIN)/mypy > $(VENV)/mypy.log 2>&1 & mypy=$$!; \
	$(BIN)/python -m pytest -ra --durations=25; tests=$$?; \
	wait $$mypy; typed=$$?; echo "mypy:"; cat $(VENV)/mypy.log; \
	[ $$tests -eq 0 ] && [ $$typed -eq 0 ]

# A real Prefect server + worker with the deployments applied; Ctrl-C stops it.
serve: install
	$(BIN)/specwatch serve

clean:
	rm -rf $(VENV) build *.egg-info
