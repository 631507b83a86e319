"""The bisect flow end to end on a real Prefect API, over already-running fake servers (endpoint images),
each with a planted speed: `fast` (steps of 10 ms), `slow` (twice as long), `quick` (half as long). A
step between two speeds is +-50-100%, far outside the seeded noise of a fake server (acceptance drawn per
prompt, the same on every server: common random numbers). `dead` never gets ready: every launch of it
fails its readiness wait, as a server that does not boot.

Each step costs 6 launches (3 rounds, the least that decides without a prior; a 4th only where a loaded host
got a cell rejected) plus the A/B's own stages, so the scenarios share bisects: a culprit in the middle (5
A/Bs), and two changes, one at each end of the range, around an image that does not boot (6 A/Bs); the
endpoints not apart take one A/B through the CLI."""

from __future__ import annotations

import gc
import json
import re
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from cli.app import app
from specwatch.bench.runner import InProcess
from specwatch.engine.ready import wait_healthy
from specwatch.spec import BisectSpec
from specwatch_testing.experiments import LOADED_HOST
from specwatch_testing.records import query as q
from specwatch_testing.server import run_fake_vllm

SPEED = {"fast": [], "slow": ["--slowdown", "2"], "quick": ["--slowdown", "0.5"], "dead": ["--boot-delay-s", "3600"]}
SERVERS = {"fast": 2, "slow": 2, "quick": 1, "dead": 1}


@pytest.fixture(scope="module")
def servers() -> Iterator[dict[str, list[str]]]:
    """Each planted speed served by distinct processes: images of one bisect must be distinct builds."""
    spec = json.dumps({"method": "ngram", "num_speculative_tokens": 3})
    base = ["--served-model-name", "demo", "--spec-config", spec, "--accept-probs", "0.99,0.98,0.97",
            "--step-ms", "10"]
    with ExitStack() as stack:
        urls = {kind: [stack.enter_context(run_fake_vllm(base + SPEED[kind], wait_healthy_s=None))
                       for _ in range(count)] for kind, count in SERVERS.items()}
        for url in (u for kind, found in urls.items() if kind != "dead" for u in found):
            wait_healthy(f"{url}/health", 30, lambda: None, poll_s=0.05)
        yield urls


@pytest.fixture(autouse=True)
def cells_in_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each launch measures in the flow's process, not a fresh one (~0.7 s of start-up per launch, 30-40
    launches per bisect): the planted steps are far larger than what Prefect's threads do to chunk stamps.
    For the same reason no full collection before each cell (bench/fanout.still_heap): in this process's
    heap (Prefect, its server client, every earlier test) it takes ~0.25 s a launch; the heap is still frozen
    for the cell."""
    monkeypatch.setattr("tasks.arms.Isolated", InProcess)
    monkeypatch.setattr("specwatch.bench.fanout.still_heap", frozen_heap)


@contextmanager
def frozen_heap() -> Iterator[None]:
    """bench/fanout.still_heap without its full collection: no gen-2 pass stalls a request of the cell."""
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def bisect_doc(urls: list[str], **extra: Any) -> dict[str, Any]:
    return {
        "name": "fake-bisect",
        "model": {"generate": {}, "served_name": "demo"},
        "images": [{"name": f"v{i}", "backend": "endpoint", "url": url, "version": f"1.{i}.0"}
                   for i, url in enumerate(urls)],
        "arm": {"speculative": {"method": "ngram", "k": 3, "prompt_lookup_max": 4}, "boot_timeout_s": 1},
        "metric": "decode_tok_s",
        "cells": ["c=1 code"],
        "error": 0.3,  # a per-step alpha the 3-round A/Bs of a few requests can decide at
        "changelog": "https://example.invalid/releases/{version}",
        # 3 rounds decide (the least without a prior); a 4th is a spare for a cell a loaded host's stalled
        # client rejects ("arrived in one burst"), which drops its round's pair (CI stop 31: one such
        # rejection left the endpoints' A/B at n=2, inconclusive)
        "design": {"rounds": 3, "max_rounds": 4, "adaptive": True, "probes": 0},
        # ~9 decode steps a request: 16 tokens (~4 steps) left a fast-vs-fast A/B at +-6% on a loaded host, not
        # inside a +-5% band; 3 requests, so that the cell's median ignores one stalled request
        "workload": {"prompt_tokens": 16, "max_tokens": 32, "requests_per_cell": 3, "warmup_requests": 0,
                     "warmup_wave": False},
        # a +-15% band: the planted steps are +-50-100%, and a loaded host's timing noise left a fast-vs-fast
        # step at -0.4% [-5.7%, +5.3%] after 4 rounds, not inside +-5%
        "thresholds": {**LOADED_HOST, "noise_band": 0.15},
        **extra,
    }


def pick(servers: dict[str, list[str]], *kinds: str) -> list[str]:
    """Servers for the images in order: the n-th `fast` in the list gets the n-th fast server."""
    used: dict[str, int] = {}
    out = []
    for kind in kinds:
        out.append(servers[kind][used.get(kind, 0)])
        used[kind] = used.get(kind, 0) + 1
    return out


def run(doc: dict[str, Any], db: Path):
    from flows.bisection import bisect

    return bisect(BisectSpec.model_validate(doc), db=str(db))


def steps(outcome) -> list[tuple[str, str, str, str]]:
    return [(s.kind, s.older, s.newer, s.outcome) for s in outcome.record.steps]


def detail(outcome) -> list[str]:
    """What a failed assertion shows: each step's decision with its interval, and the notes."""
    return [f"{s.older}..{s.newer} {s.outcome} {s.reason}" for s in outcome.record.steps] + outcome.record.notes


def test_a_culprit_in_the_middle_is_found_verified_reported_and_stored(prefect_api: None, servers,
                                                                      tmp_path: Path) -> None:
    db = tmp_path / "h.duckdb"
    outcome = run(bisect_doc(pick(servers, "fast", "fast", "slow", "slow")), db)
    assert outcome.record.headline == "culprit: regression at v2 (against v1)", detail(outcome)
    assert outcome.exit_code == 0
    # the left half differs, so the right half is measured too (flat: no second change); the left half's left
    # half is flat, so the change is in v1 .. v2, inferred, and verified by a fresh A/B
    assert steps(outcome) == [("endpoints", "v0", "v3", "REVERT"), ("step", "v0", "v2", "REVERT"),
                              ("step", "v2", "v3", "NO CHANGE"), ("step", "v0", "v1", "NO CHANGE"),
                              ("verify", "v1", "v2", "REVERT")], detail(outcome)
    verify = outcome.record.steps[-1]
    assert verify.high is not None and -0.6 < verify.low < verify.high < -0.3  # 1/2 - 1 = -50%
    # 3 rounds each (6 launches), 4 where a loaded host's cell was rejected; the count is the launches made
    assert [s.launches for s in outcome.record.steps] == [2 * s.rounds for s in outcome.record.steps]
    assert all(s.rounds in (3, 4) for s in outcome.record.steps), detail(outcome)
    launches = outcome.record.launches
    assert launches == sum(s.launches for s in outcome.record.steps) == q(db, "select count(*) from arms")[0][0]
    report = outcome.report.read_text()
    assert "https://example.invalid/releases/1.2.0" in report and "| 5 | verify | 1.1.0 | 1.2.0 | REVERT |" in report
    assert "at most 30%" in report
    rows = q(db, "select name, headline, culprits, launches from bisects")
    assert rows == [("fake-bisect", outcome.record.headline, "regression at v2 (against v1)", launches)]
    assert q(db, "select count(*) from bisect_results where call = 'regression'") == [(3,)]
    # every step's A/B is a stored run of its own
    assert q(db, "select count(distinct run_id) from runs") == [(5,)]


def test_two_changes_at_either_end_around_an_image_that_does_not_boot(prefect_api: None, servers,
                                                                     tmp_path: Path) -> None:
    # The endpoints say regression (fast -> slow). v1 is a gain, v3 a larger regression: a culprit at each end
    # of the range, and neither alone is the answer. v2 never gets ready: the first midpoint's A/B fails, v2 is
    # skipped and listed, and the search goes on over v0, v1, v3 (the default budget, 6 A/Bs, is just enough).
    outcome = run(bisect_doc(pick(servers, "fast", "quick", "dead", "slow")), tmp_path / "h.duckdb")
    record = outcome.record
    assert steps(outcome) == [("endpoints", "v0", "v3", "REVERT"), ("step", "v0", "v2", "FAILED"),
                              ("step", "v0", "v1", "PROMOTE"), ("step", "v1", "v3", "REVERT"),
                              ("verify", "v0", "v1", "PROMOTE"), ("verify", "v1", "v3", "REVERT")], detail(outcome)
    assert record.headline == ("several changes, no single culprit: gain at v1 (against v0), regression at v3 or "
                               "skipped v2 (against v1)"), detail(outcome)
    assert outcome.exit_code == 0
    assert record.skipped == ["v2"]
    assert record.steps[1].failed_images == ["v2"] and "not ready" in record.steps[1].reason
    assert "skipped (did not build or boot)" in outcome.report.read_text()


def test_endpoints_not_decided_apart_stop_the_bisect_in_one_line(prefect_api: None, servers, tmp_path: Path
                                                                  ) -> None:
    path = write(tmp_path, bisect_doc(pick(servers, "fast", "slow", "fast")))
    monkey_free = CliRunner().invoke(app, ["bisect", str(path), "--db", str(tmp_path / "h.duckdb")])
    assert monkey_free.exit_code == 1, monkey_free.output
    assert (f"error: {path}: the endpoints are not decided apart (flat): there is no change to bisect"
            in " ".join(monkey_free.stderr.split()))
    # one A/B: its 3 rounds (a 4th where a loaded host's cell was rejected), every launch counted
    (status, launches), = q(tmp_path / "h.duckdb", "select status, launches from bisects")
    assert status == "stopped" and launches in (6, 8)
    assert q(tmp_path / "h.duckdb", "select count(*) from arms") == [(launches,)]


def write(tmp: Path, doc: dict[str, Any]) -> Path:
    path = tmp / "bisect.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


GOOD = bisect_doc(["http://127.0.0.1:9/a", "http://127.0.0.1:9/b", "http://127.0.0.1:9/c"])


@pytest.mark.parametrize(("change", "line"), [
    ({"images": GOOD["images"][:2]}, "images: 2 image(s): a bisect needs at least 3"),
    ({"images": [GOOD["images"][i] for i in (0, 2, 1)]},
     "images: image 'v1' (1.1.0) comes after 'v2' (1.2.0) but is not newer; fix: list the versions oldest first"),
    ({"images": [*GOOD["images"][:2], {**GOOD["images"][1], "name": "again"}]},
     "images: images 'v1' and 'again' are the same build; fix: list each version once"),
    ({"images": [*GOOD["images"][:2], GOOD["images"][1]]}, "images: image 'v1' is listed twice"),
    ({"metric": "tok_per_joule"}, "metric: unknown metric(s) 'tok_per_joule'; known metrics: decode_tok_s"),
    ({"cells": ["c=1 poetry"]}, "cells[0]: prompt class 'poetry' is not one of"),
    ({"cells": ["c=1 code", "c=1 prose", "c=2 code"]}, "'c=2 prose' is missing; fix: add it, or bisect twice"),
    ({"arm": {**GOOD["arm"], "image": "v2"}}, "arm.image: a bisect runs its one arm on every image in turn; fix: "
                                              "remove arm.image"),
    ({"error": 0.7}, "error: Input should be less than 0.5 (got 0.7); fix: use a smaller value"),
])
@pytest.mark.parametrize("command", ["bisect", "validate"])
def test_bad_input_is_one_line_naming_field_value_and_fix(tmp_path: Path, change: dict[str, Any], line: str,
                                                          command: str) -> None:
    res = CliRunner().invoke(app, [command, str(write(tmp_path, {**GOOD, **change}))])
    assert res.exit_code == 1
    problems = [ln.strip() for ln in res.stderr.splitlines()[1:]]
    assert len(problems) == 1 and line in problems[0], res.stderr
    assert "Traceback" not in res.output + res.stderr


def test_validate_prints_a_bisect_files_plan_and_starts_nothing(tmp_path: Path) -> None:
    res = CliRunner().invoke(app, ["validate", str(REPO / "examples/bisect-vllm-cpu.yaml")],
                             env={"SPECWATCH_HOME": str(tmp_path)})
    assert res.exit_code == 0, res.output
    text = " ".join(res.stdout.split())
    for i, version in enumerate(["0.27.0", "0.27.1", "0.28.0", "0.29.0", "0.30.0", "0.31.0", "0.32.0"]):
        assert f"│ {i} │ cpu-{version} │ {version} │ venv │" in text
    assert "metric decode_tok_s on c=1 prose; the endpoints first, then at most 8 A/Bs in all" in text
    assert "each A/B decides at one-sided alpha 0.0083 = 0.1 / (1.5 x 8 A/Bs at most)" in text
    assert "one A/B: up to 12 launches (6 rounds)" in text
    assert not list(tmp_path.iterdir())  # nothing built, stored or started
    # --plan: the rounds a step needs at its own alpha, which the 0.05 of a plain A/B would understate
    res = CliRunner().invoke(app, ["validate", "--plan", str(REPO / "examples/bisect-vllm-cpu.yaml")],
                             env={"SPECWATCH_HOME": str(tmp_path), "SPECWATCH_CACHE": str(tmp_path / "cache")})
    assert res.exit_code == 0, res.output
    text = " ".join(res.stdout.split())
    assert "stored variance: none looked up (image 'cpu-0.27.0' is not built on this host yet" in text
    need = re.search(r"a \+-10% change at every level is called in its direction with 80% power after (\d+) round",
                     text)
    assert need and int(need.group(1)) > 6 and "this design stops at 6 round(s)" in text, text


REPO = Path(__file__).resolve().parents[1]
BETWEEN = ["0.27.1", "0.28.0", "0.29.0", "0.30.0", "0.31.0"]


def shipped(name: str) -> dict[str, Any]:
    """A deployment of deployments/prefect.yaml, as shipped."""
    doc = yaml.safe_load((REPO / "deployments/prefect.yaml").read_text())
    return next(d for d in doc["deployments"] if d["name"] == name)


def test_the_nightly_revert_starts_a_flow_run_of_the_bisect_deployment_over_the_versions_between(
        prefect_api: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The follow-up on a real Prefect API: the regression flow, its A/B decided REVERT, creates a flow run of
    `bisect-on-demand` (not run: no worker polls this API) with parameters that the deployment's schema
    accepts and the bisect flow validates."""
    from prefect import get_client
    from prefect.client.schemas.filters import DeploymentFilter, DeploymentFilterId
    from prefect.client.schemas.objects import FlowRun
    from prefect.deployments import run_deployment
    from prefect.exceptions import PrefectHTTPStatusError
    from prefect.utilities.asyncutils import run_coro_as_sync

    from flows.ab import RunOutcome
    from flows.bisection import bisect
    from flows.regression import regression, start_bisect
    from specwatch.spec import parse_spec

    nightly, target = shipped("nightly-image"), shipped("bisect-on-demand")
    # what the nightly's default bisect_deployment names is the shipped bisect deployment
    assert target["entrypoint"] == "flows/bisection.py:bisect"
    default = regression.parameters.properties["bisect_deployment"]["default"]
    assert default == f"{bisect.name}/{target['name']}"
    deployment_id = bisect.to_deployment(name=target["name"]).apply()  # enforces the parameter schema

    # the nightly as shipped, its A/B decided REVERT with no history failure (not measured: the stub is all of
    # the nightly's A/B, its history checks included); what is real is the regression flow's branch and
    # start_bisect against this API
    params = nightly["parameters"]
    monkeypatch.setattr("flows.regression.ab", lambda spec, **kw: RunOutcome(
        run_id="nightly-1", run_dir=tmp_path / "run", db_path=tmp_path / "specwatch.duckdb", exit_code=3,
        headline="REVERT", decision="REVERT"))
    state = regression(experiment_file=str(REPO / params["experiment_file"]), cluster="gpu-a",
                       bisect_versions=params["bisect_versions"], return_state=True)
    assert state.name == "Regression", state
    found = re.search(r"bisect cpu-0.27 .. cpu-0.32 started as flow run (\S+)$", state.message or "")
    assert found, state.message
    run_id = found.group(1)

    async def created() -> FlowRun:
        async with get_client() as client:
            return await client.read_flow_run(run_id)

    async def runs() -> list[FlowRun]:
        async with get_client() as client:
            return await client.read_flow_runs(deployment_filter=DeploymentFilter(id=DeploymentFilterId(
                any_=[deployment_id])))

    run = run_coro_as_sync(created())
    assert run.deployment_id == deployment_id and run.state is not None and run.state.is_scheduled()
    assert run.parameters["cluster"] == "gpu-a" and run.parameters["db"] is None
    follow = BisectSpec.model_validate(run.parameters["spec"])  # what the deployment's flow will validate again
    assert params["bisect_versions"] == BETWEEN and [i.version for i in follow.images] == ["0.27.0", *BETWEEN, "0.32.0"]
    assert follow.cells == ["c=1 code", "c=1 prose"] and follow.metric == "decode_tok_s"
    assert follow.arm.speculative is not None and follow.arm.speculative.k == 5
    # an A/B of one image (k against k) has nothing to bisect: one line, nothing started
    assert start_bisect(parse_spec(REPO / "examples/cpu-ngram.yaml"), BETWEEN, default, None, "local").startswith(
        "no bisect: experiment cpu-ngram-k5-vs-nospec: a bisect follows an A/B of one image against another")
    assert [r.id for r in run_coro_as_sync(runs())] == [run.id]
    # the schema is enforced: a follow-up the bisect flow would refuse is not even created
    with pytest.raises(PrefectHTTPStatusError, match="Validation failed for field 'spec'"):
        run_deployment(default, parameters={"spec": {"name": "no-images"}}, timeout=0)
    assert [r.id for r in run_coro_as_sync(runs())] == [run.id]


def test_the_example_bisect_file_is_valid() -> None:
    from specwatch.bisect.steps import resolve_bisect
    from specwatch.spec import parse_bisect

    spec = resolve_bisect(parse_bisect(REPO / "examples/bisect-vllm-cpu.yaml"))
    assert [i.version for i in spec.images] == ["0.27.0", *BETWEEN, "0.32.0"]
