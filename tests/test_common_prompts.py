"""Common random numbers (issue 22): every launch of a run sends the same requests, rounds to a server that
lives on differ, arms that share one running server get nonces of their own, and each request's output
hash is stored and compared.

End to end on fake_vllm, whose output text is a function of the prompt (and its --seed, the same for every
server here), as greedy decoding's is: equal prompts give equal outputs.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from specwatch.analysis.outputs import output_matches
from specwatch.analysis.verdict import assess
from specwatch.bench.client import BenchTarget
from specwatch.bench.gates import Gates
from specwatch.bench.runner import CellCallback, InProcess, prepare, probe
from specwatch.engine.arm import run_arm
from specwatch.engine.experiment import Hooks, new_result, run_experiment
from specwatch.engine.images.registry import backend_for
from specwatch.engine.launchers import LaunchContext
from specwatch.engine.namespaces import launch_namespace, nonce_scopes, server_of, sharing_a_server
from specwatch.records import ArmResult, CheckpointFacts, ImageRef, RunResult
from specwatch.report.markdown import render_markdown
from specwatch.report.rows import verdict_rows
from specwatch.spec import ArmSpec, ExperimentSpec, SweepSpec, WorkloadSpec
from specwatch.store import queries
from specwatch.store.ingest import ingest
from specwatch_testing.experiments import LOADED_HOST, command_ab, endpoint_ab, fake_checkpoint
from specwatch_testing.server import run_fake_vllm

LOG = logging.getLogger("test_common_prompts")
SERVER = ["--served-model-name", "demo", "--spec-config", '{"method": "ngram", "num_speculative_tokens": 3}',
          "--accept-probs", "0.9,0.8,0.7", "--step-ms", "2"]
# Two classes, two levels (the c=2 cell has a warm-up wave), prompts of several KV blocks (16 tokens).
WORKLOAD = {"prompt_classes": ["code", "json"], "prompt_tokens": 48, "max_tokens": 24, "concurrency": [1, 2],
            "requests_per_cell": 4, "warmup_requests": 2, "warmup_wave": True}


def spec_of(base_url: str, cand_url: str, rounds: int = 2) -> ExperimentSpec:
    doc = endpoint_ab("crn", base_url, cand_url, design={"rounds": rounds, "probes": 2, "probe_tokens": 8},
                      workload=WORKLOAD)
    doc["thresholds"] = LOADED_HOST  # a loaded CI host's client gates are not what this is about
    return ExperimentSpec.model_validate(doc)


def run(spec: ExperimentSpec, tmp: Path) -> RunResult:
    """The engine's runner with plain stages (no Prefect), each launch measured in this process."""
    hooks = Hooks(build_image=lambda s: backend_for(s).ensure(s), prepare_checkpoint=_no_checkpoint,
                  launch=_launch, log=LOG)
    result = new_result(spec, "crn-run", None)
    run_experiment(spec, result, tmp / "run", tmp / "h.duckdb", hooks)
    assert [a.status for a in result.arms] == ["ok"] * len(result.arms), [a.reason for a in result.arms]
    return result


def _launch(arm: ArmSpec, spec: ExperimentSpec, image: ImageRef, ctx: LaunchContext, facts: CheckpointFacts | None,
            namespace: str, round_no: int = 1, on_cell: CellCallback | None = None, sweep: SweepSpec | None = None
            ) -> ArmResult:
    return run_arm(arm, spec, image, ctx, facts, namespace, round_no, runner=InProcess(on_cell))


def _no_checkpoint(*_: object) -> CheckpointFacts:
    raise AssertionError("endpoint arms serve their own weights: no checkpoint step")


def requests_by_launch(result: RunResult) -> dict[tuple[str, int], dict[tuple[str, int], str | None]]:
    """(arm, round) -> (cell, index) -> request id."""
    return {(a.name, a.round): {(c.cell, r.index): r.request_id for c in a.cells for r in c.requests}
            for a in result.arms}


def test_booted_servers_share_the_runs_namespace_and_a_server_that_lives_on_gets_one_per_round() -> None:
    assert launch_namespace("r", 1, "base", "run") == launch_namespace("r", 2, "cand", "run") == "r"
    assert launch_namespace("r", 1, "base", "round") == launch_namespace("r", 1, "cand", "round") == "r:b1"
    assert launch_namespace("r", 2, "base", "round") != "r:b1"
    assert launch_namespace("r", 1, "base", "arm") != launch_namespace("r", 1, "cand", "arm")


def test_only_arms_that_reach_one_running_server_need_nonces_of_their_own(tmp_path: Path) -> None:
    # booted servers are fresh: arms of one image still share prompts, in every round
    booted = ExperimentSpec.model_validate(command_ab("x", str(fake_checkpoint(tmp_path / "ckpt")), sys.executable))
    assert sharing_a_server(booted) == frozenset()
    assert set(nonce_scopes(booted).values()) == {"run"}
    assert nonce_scopes(spec_of("http://127.0.0.1:8000", "http://127.0.0.1:8001")) == {"base": "round", "cand": "round"}
    assert nonce_scopes(spec_of("http://localhost:8000/", "http://127.0.0.1:8000")) == {"base": "arm", "cand": "arm"}
    assert sharing_a_server(spec_of("http://127.0.0.1:8000", "http://127.0.0.1:8001")) == frozenset()
    assert sharing_a_server(spec_of("http://localhost:8000/", "http://127.0.0.1:8000")) == {"base", "cand"}
    assert server_of("http://LOCALHOST") == server_of("http://[::1]:80/") != server_of("https://localhost")


@contextmanager
def two_servers() -> Iterator[tuple[str, str]]:
    with run_fake_vllm(SERVER) as base, run_fake_vllm(SERVER) as cand:
        yield base, cand


@pytest.fixture(scope="module")
def paired(tmp_path_factory: pytest.TempPathFactory) -> tuple[ExperimentSpec, RunResult, Path]:
    tmp = tmp_path_factory.mktemp("paired")
    with two_servers() as (base, cand):
        spec = spec_of(base, cand)
        result = run(spec, tmp)
    ingest(result, tmp / "h.duckdb")  # as the flow does after the launches
    return spec, result, tmp / "h.duckdb"


def test_the_arms_of_a_round_send_the_same_requests_and_rounds_differ(paired) -> None:
    _, result, _ = paired
    launches = requests_by_launch(result)
    for round_no in (1, 2):
        assert launches[("base", round_no)] == launches[("cand", round_no)]
        assert len(launches[("base", round_no)]) == 16  # 4 cells x 4 requests
    assert not set(launches[("base", 1)].values()) & set(launches[("base", 2)].values())


def test_each_output_hash_is_stored_and_the_match_rate_reported(paired) -> None:
    spec, result, db = paired
    hashes = {r.output_sha256 for a in result.arms for c in a.cells for r in c.requests}
    assert None not in hashes and all(len(h) == 16 for h in hashes)
    # fake_vllm's text is a function of the prompt: same prompt, same output, in every pair
    assert {(m.arm, m.paired, m.matched) for m in output_matches(result, "base")} == {("cand", 8, 8)}
    rows = queries.run_named(queries.connect(db), "output-match", {"run_id": result.run_id})
    assert sorted(map(tuple, rows.itertuples(index=False))) == sorted(
        ("cand", c.cell, 8, 8, 100.0) for c in result.arms[0].cells)
    assessment = assess(result, spec)
    report = render_markdown(result, spec, assessment, verdict_rows(result, spec, assessment), [])
    assert "| cand | closed/c2/json/p48 | 8 | 8 (100%) |" in report
    assert "only the greedy probes judge correctness" in report


def test_arms_that_share_a_server_get_nonces_of_their_own(tmp_path: Path) -> None:
    with run_fake_vllm(SERVER) as url:
        spec = spec_of(url, url, rounds=1)
        result = run(spec, tmp_path)
    launches = requests_by_launch(result)
    base, cand = launches[("base", 1)], launches[("cand", 1)]
    assert base.keys() == cand.keys() and not set(base.values()) & set(cand.values())
    # the second arm's cells were not served from the first arm's prompts (measurement rule 1)
    for arm in result.arms:
        for cell in arm.cells:
            assert cell.window.prefix_cache_hit_rate == 0.0, (arm.name, cell.cell)
    assert output_matches(result, "base") == []  # different prompts: nothing to pair by output


def test_warm_ups_waves_and_probes_never_share_a_prefix_with_the_cells(tmp_path: Path) -> None:
    """A launch's every request (warm-ups, probes, the waves before cells, the cells) on one fake_vllm, whose
    prefix cache counts every hit in whole 16-token blocks: none. A second arm on the same server with nonces
    of its own: its cells hit nothing either; with the first arm's namespace they would."""
    wl = WorkloadSpec.model_validate(WORKLOAD)
    spec = spec_of("http://127.0.0.1:1", "http://127.0.0.1:2")

    def warm_and_probe(target: BenchTarget) -> None:
        asyncio.run(prepare(target, wl, spec.sampling))
        asyncio.run(probe(target, wl, 2, 8))

    def cells(target: BenchTarget) -> None:
        InProcess().measure(target, wl, spec.sampling, Gates.of(spec))

    def totals(url: str) -> tuple[int, int]:
        """Requests served and prefix-cache hits (tokens) since the last reset."""
        body = httpx.get(f"{url}/truth").json()["totals"]
        return int(body["requests"]), int(body["prefix_cache_hits"])

    with run_fake_vllm(SERVER) as url:
        first = BenchTarget(url, "demo", launch_namespace("r", 1, "base", "round"))
        warm_and_probe(first)
        cells(first)
        # 2 warm-ups, 2 probes, waves of 1 + 1 + 2 + 2 before the cells, 4 cells of 4 requests: no hit at all
        assert totals(url) == (2 + 2 + 6 + 16, 0)
        # the probes repeat on a shared server on purpose (every arm answers the same ones; never timed)
        second = BenchTarget(url, "demo", launch_namespace("r", 1, "cand", "arm"))
        warm_and_probe(second)
        httpx.post(f"{url}/truth/reset").raise_for_status()  # the counts, not the cache
        cells(second)
        assert totals(url) == (6 + 16, 0)
        cells(first)  # why arms on one server need nonces of their own
        assert totals(url)[1] > 0
