"""The deployments on a real Prefect server: `prefect server start`, the process work pool, a
worker, the deployments applied from deployments/prefect.yaml; a run triggered through the API
must complete, land in DuckDB and attach its report artifacts; the UI shows them in a browser."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import duckdb
import httpx
import pytest

from cli.serve import Stack, apply_deployments, start_server, start_worker
from specwatch.engine import processes
from specwatch.engine.launchers import free_port
from specwatch.resolve import load_spec
from specwatch.spec import ExperimentSpec
from specwatch_testing.browser import screenshot
from specwatch_testing.experiments import LOADED_HOST, endpoint_ab
from specwatch_testing.records import query
from specwatch_testing.server import run_fake_vllm

SPEC = json.dumps({"method": "ngram", "num_speculative_tokens": 3})


def experiment(base: str, cand: str) -> dict:
    return endpoint_ab("deployed-ab", base, cand, design={"rounds": 1, "probes": 1, "probe_tokens": 8},
                       workload={"prompt_classes": ["code"], "prompt_tokens": 32, "max_tokens": 64,
                                 "concurrency": [1], "requests_per_cell": 3, "warmup_requests": 1})


def call(method, url: str, **kw) -> httpx.Response:
    """SQLite-backed Prefect answers 503 while its database is busy: retry those."""
    for _ in range(30):
        resp = method(url, **kw)
        if resp.status_code != 503:
            return resp.raise_for_status()
        time.sleep(1)
    return resp.raise_for_status()


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory):
    home = tmp_path_factory.mktemp("served")
    with start_server(home, free_port()) as stack:
        output = apply_deployments(stack)
        assert "ab-on-demand" in output
        start_worker(stack, query_seconds=2)
        yield stack


@pytest.fixture(scope="module")
def finished_run(stack: Stack, tmp_path_factory: pytest.TempPathFactory):
    db = tmp_path_factory.mktemp("db") / "h.duckdb"
    api = httpx.Client(base_url=stack.api_url, timeout=30)
    deployment = call(api.get, "/deployments/name/specwatch-ab/ab-on-demand").json()
    args = ["--served-model-name", "demo", "--spec-config", SPEC, "--step-ms", "5"]
    with run_fake_vllm(args) as base, run_fake_vllm(args) as cand:
        run = call(api.post, f"/deployments/{deployment['id']}/create_flow_run", json={
            "parameters": {"experiment": experiment(base, cand), "db": str(db)}}).json()
        deadline = time.monotonic() + 240
        while True:
            state = call(api.get, f"/flow_runs/{run['id']}").json()["state"]
            if state["type"] in ("COMPLETED", "FAILED", "CRASHED", "CANCELLED"):
                break
            assert time.monotonic() < deadline, f"flow run still {state['type']} after 240 s"
            time.sleep(2)
    return deployment, run, state, db, api


def test_deployments_are_applied_with_the_nightly_schedule(stack: Stack) -> None:
    out = stack.cli("deployment", "ls").stdout
    assert "specwatch-ab/ab-on-demand" in out and "specwatch-regression/nightly-regression" in out
    nightly = call(httpx.get, f"{stack.api_url}/deployments/name/specwatch-regression/nightly-regression").json()
    assert [s["schedule"]["cron"] for s in nightly["schedules"]] == ["0 2 * * *"]
    assert nightly["parameters"]["baseline"] == {"policy": "auto"}
    weekly = call(httpx.get, f"{stack.api_url}/deployments/name/specwatch-sweep/weekly-sweep").json()
    assert [s["schedule"]["cron"] for s in weekly["schedules"]] == ["0 4 * * 0"]
    assert load_spec(Path(__file__).resolve().parents[1] / weekly["parameters"]["experiment_file"]).sweep is not None
    # the on-demand form opens filled with the demo experiment, every field valid as it stands
    on_demand = call(httpx.get, f"{stack.api_url}/deployments/name/specwatch-ab/ab-on-demand").json()
    demo = load_spec(Path(__file__).resolve().parents[1] / "examples" / "cpu-ngram.yaml")
    assert ExperimentSpec.model_validate(on_demand["parameters"]["experiment"]) == demo


def test_triggered_run_completes_and_lands_in_duckdb(finished_run) -> None:
    _, run, state, db, _ = finished_run
    assert state["type"] == "COMPLETED", state
    con = duckdb.connect(str(db), read_only=True)
    try:
        runs = con.execute("select flow_run_id from runs").fetchall()
        cells = con.execute("select arm, requests_ok from cells order by arm").fetchall()
    finally:
        con.close()
    assert runs == [(run["id"],)]
    assert cells == [("base", 3), ("cand", 3)]


def test_report_artifacts_are_attached_to_the_flow_run(finished_run) -> None:
    _, run, _, _, api = finished_run
    artifacts = call(api.post, "/artifacts/filter", json={"artifacts": {"flow_run_id": {"any_": [run["id"]]}}}).json()
    kinds = sorted(a["type"] for a in artifacts)
    assert kinds == ["markdown", "table"]
    markdown = next(a for a in artifacts if a["type"] == "markdown")
    assert "## Conclusion" in markdown["data"] and "## Conditions" in markdown["data"]
    table = json.loads(next(a for a in artifacts if a["type"] == "table")["data"])
    assert {row["arm"] for row in table} == {"base", "cand"}


def ui(stack: Stack) -> str:
    return stack.api_url.removesuffix("/api")


def test_ui_shows_the_on_demand_parameter_form(stack: Stack, finished_run, browser) -> None:
    deployment = finished_run[0]
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(f"{ui(stack)}/deployments/deployment/{deployment['id']}/run", wait_until="networkidle")
    page.get_by_text("Baseline", exact=True).first.wait_for(timeout=30000)
    text = page.inner_text("body")
    screenshot(page, "ui-ab-on-demand-form")
    # the pydantic ExperimentSpec parameter renders as a form with its fields and their help
    for field in ("experiment", "Model", "Images", "Arms", "Baseline", "Workload", "Prompt Tokens"):
        assert field in text, field
    assert "A checkpoint directory on disk, a model the project generates, or a packaged GGUF model." in text


def test_ui_shows_the_finished_runs_report_table(stack: Stack, finished_run, browser) -> None:
    _, run, _, _, api = finished_run
    table = next(a for a in call(api.post, "/artifacts/filter", json={
        "artifacts": {"flow_run_id": {"any_": [run["id"]]}}}).json() if a["type"] == "table")
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(f"{ui(stack)}/artifacts/artifact/{table['id']}", wait_until="networkidle")
    page.get_by_text("cand", exact=True).first.wait_for(timeout=30000)
    text = page.inner_text("body")
    screenshot(page, "ui-report-table-artifact")
    assert "base" in text and "decode_tok_s" in text


def test_cancelling_a_deployed_run_stops_its_servers_and_stores_it_partial(stack: Stack, finished_run,
                                                                          tmp_path: Path) -> None:
    """Cancellation from the API (as the UI's Cancel button): the worker SIGTERMs the flow run's process."""
    _, _, _, _, api = finished_run
    db = tmp_path / "h.duckdb"
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "model_type": "llama"}))
    slow = ("{python} -m specwatch_testing.fake_vllm --port {port} --served-model-name {served_name} "
            "--spec-config {spec_config} --step-ms 40")
    ngram = {"method": "ngram", "k": 3, "prompt_lookup_max": 4}
    exp = {"name": "cancelled", "model": {"path": str(ckpt), "served_name": "demo"},
           "images": [{"name": "py", "backend": "python", "python": sys.executable}],
           "arms": [{"name": n, "image": "py", "launcher": "command", "command": slow, "speculative": ngram}
                    for n in ("base", "cand")],
           "baseline": "base", "design": {"rounds": 1, "probes": 0}, "thresholds": LOADED_HOST,
           "workload": {"prompt_classes": ["code", "json"], "prompt_tokens": 24, "max_tokens": 48,
                        "concurrency": [1], "requests_per_cell": 8, "warmup_requests": 1}}
    deployment = call(api.get, "/deployments/name/specwatch-ab/ab-on-demand").json()
    before = set((stack.home / "runs").glob("*"))
    run = call(api.post, f"/deployments/{deployment['id']}/create_flow_run",
               json={"parameters": {"experiment": exp, "db": str(db)}}).json()
    deadline = time.monotonic() + 180
    server = None
    while server is None:  # a finished cell in results.json, and the launch's server from its state-dir record
        assert time.monotonic() < deadline, "the deployed run never finished a cell"
        for run_dir in set((stack.home / "runs").glob("*")) - before:
            try:
                doc = json.loads((run_dir / "results.json").read_text())
            except (OSError, ValueError):
                continue
            traces = list((stack.home / "state" / "launches" / doc["run_id"]).glob("*.json"))
            if any(a["in_progress"] and a["cells"] for a in doc["arms"]) and traces:
                server = int(json.loads(traces[0].read_text())["ident"])
        time.sleep(0.2)
    cancelled_at = time.monotonic()
    call(api.post, f"/flow_runs/{run['id']}/set_state", json={"state": {"type": "CANCELLING"}, "force": True})
    while processes.group_alive(server) and time.monotonic() - cancelled_at < 60:
        time.sleep(0.1)
    assert not processes.group_alive(server), "the cancelled run's server was left running"
    assert time.monotonic() - cancelled_at < 10 + 2 * 2  # 10 s, plus up to two worker polls (query_seconds=2)
    while call(api.get, f"/flow_runs/{run['id']}").json()["state"]["type"] not in ("CANCELLED", "CRASHED", "FAILED"):
        assert time.monotonic() - cancelled_at < 60
        time.sleep(1)
    ((partial, arms, cells),) = query(db, "select partial, (select count(*) from arms), (select count(*) from cells) "
                                          "from runs")
    assert partial and arms >= 1 and cells >= 1  # what it had measured was stored, marked partial


