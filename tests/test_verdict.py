"""The decision from rounds, on synthetic runs with known answers (no server)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from cli.app import app
from specwatch.analysis.sequential import COMPOSITE, PriorVariance
from specwatch.analysis.verdict import Assessment, assess, control_arms, decision_records, first_divergence
from specwatch.records import RunResult
from specwatch.report import markdown
from specwatch.report.rows import verdict_rows
from specwatch.spec import ExperimentSpec
from specwatch.store.ingest import ingest
from specwatch_testing import records as rf

NGRAM = {"method": "ngram", "prompt_lookup_max": 4}


def spec(**design: object) -> ExperimentSpec:
    return ExperimentSpec.model_validate({
        "name": "synthetic", "model": {"generate": {}}, "images": [{"name": "cpu", "version": "0.32.0"}],
        "arms": [{"name": "k3", "image": "cpu", "speculative": {**NGRAM, "k": 3}},
                 {"name": "k5", "image": "cpu", "speculative": {**NGRAM, "k": 5}}],
        "baseline": "k3", "design": {"rounds": 3, **design},
        "workload": {"prompt_classes": ["code", "prose"], "concurrency": [1, 4]},
    })


def rounds_run(cand_speedup: float, cand_curve: list[float], noise: float = 0.01,
               probes: tuple[list[int], list[int]] = ([1, 2, 3], [1, 2, 3]), rounds: int = 3) -> RunResult:
    """`rounds` launches per arm; the candidate decodes `cand_speedup` times faster."""
    rng = np.random.default_rng(0)
    arms = []
    for round_no in range(1, rounds + 1):
        for name, k, speed, curve, probe in (("k3", 3, 1.0, [80.0, 60.0, 40.0], probes[0]),
                                             ("k5", 5, cand_speedup, cand_curve, probes[1])):
            arm = rf.arm(name, k, 1.0 / (speed * (1 + rng.normal(0, noise))), curve)
            arms.append(arm.model_copy(update={"round": round_no, "probes": [probe]}))
    result = rf.run(arms=arms)
    result.experiment = spec().model_dump(mode="json")
    return result


def render_markdown(result: RunResult, a: Assessment) -> str:
    return markdown.render_markdown(result, spec(), a, verdict_rows(result, spec(), a), [])


def test_a_clear_gain_with_a_healthy_tail_promotes() -> None:
    a = assess(rounds_run(1.2, [85.0, 70.0, 55.0, 45.0, 35.0]), spec())
    assert a.verdict.decision == "PROMOTE"
    assert {c.outcome for c in a.cells} == {"gain"} and len(a.cells) == 4
    assert all(c.ci.n_pairs == 3 and 0.15 < c.ci.estimate < 0.25 for c in a.cells)
    (arm,) = a.arms
    assert arm.decision.outcome == "PROMOTE" and arm.decision.rounds == 3
    assert [c.k for c in a.curves] == [3, 5] and a.curves[1].per_position[-1] == pytest.approx(0.35)


def test_a_collapsed_tail_reverts_even_when_faster() -> None:
    a = assess(rounds_run(1.2, [85.0, 60.0, 40.0, 20.0, 10.0]), spec())
    assert a.verdict.decision == "REVERT"
    assert any("tail collapse: k5" in r for r in a.verdict.reasons)
    failed = [q for q in decision_records(a, spec()) if not q.passed]
    assert [q.check for q in failed] == ["acceptance.tail_floor"]


def test_changed_greedy_output_reverts_with_the_first_diverging_token() -> None:
    a = assess(rounds_run(1.2, [85.0, 70.0, 55.0, 45.0, 35.0], probes=([1, 2, 3, 4], [1, 2, 9, 4])), spec())
    assert a.verdict.decision == "REVERT"
    (d,) = a.divergences
    assert (d.arm, d.reference, d.position) == ("k5", "k3", 2)
    assert first_divergence([1, 2], [1, 2, 3]) == 2 and first_divergence([1], [1]) is None


def test_noise_wider_than_the_band_is_inconclusive_with_how_many_more_rounds() -> None:
    a = assess(rounds_run(1.0, [85.0, 70.0, 55.0, 45.0, 35.0], noise=0.08), spec())
    assert a.verdict.decision == "INCONCLUSIVE"
    (arm,) = a.arms
    assert arm.decision.outcome == "INCONCLUSIVE" and arm.decision.rounds == 3
    (reason,) = a.verdict.arm_reasons
    assert reason.startswith("k5: maximum of 3 rounds reached")
    assert "more round(s) would likely decide" in reason or "band's edge" in reason


def test_no_effect_with_low_noise_is_no_change_and_the_report_says_how_it_was_decided() -> None:
    result = rounds_run(1.0, [85.0, 70.0, 55.0, 45.0, 35.0], noise=0.002)
    a = assess(result, spec())
    assert a.verdict.decision == "NO CHANGE"
    assert {c.outcome for c in a.cells} == {"flat"}
    interval = a.arms[0].decision.composite.interval
    assert interval is not None and -0.05 < interval.low < interval.high < 0.05
    text = render_markdown(result, a)
    assert "**NO CHANGE**" in text
    assert "`k5` vs `k3`: **NO CHANGE**" in text and "group-sequential paired t over rounds" in text
    assert "rounds: 3; fixed design: 3 round(s), one look" in text
    assert "source: this run (sd" in text
    assert "12 of 12 cell-round(s) from requests paired by index" in text


def test_a_stored_variance_that_agrees_decides_in_two_rounds() -> None:
    two = spec(rounds=2)
    prior = PriorVariance(0.01, 20, "A/A 2026-12-01 cpu")
    cells = {(c.key.id, "decode_tok_s") for a in rounds_run(1.2, [85.0, 70.0, 55.0, 45.0, 35.0]).arms for c in a.cells}
    priors = {key: prior for key in cells} | {(COMPOSITE, "decode_tok_s"): prior}
    result = rounds_run(1.2, [85.0, 70.0, 55.0, 45.0, 35.0], rounds=2)
    assert assess(result, two).verdict.decision == "INCONCLUSIVE"  # two rounds of its own: no interval
    a = assess(result, two, priors)
    assert a.verdict.decision == "PROMOTE"
    assert a.arms[0].decision.variance is not None and a.arms[0].decision.variance.source.startswith("pooled: A/A")


def test_alpha_outside_the_open_interval_is_one_line_naming_field_value_and_fix(tmp_path: Path) -> None:
    with pytest.raises(ValidationError) as err:
        spec(alpha=0.5)
    assert "alpha=0.5: must lie in (0, 0.5); fix: use e.g. 0.05" in str(err.value)
    bad = tmp_path / "bad.yaml"
    bad.write_text(json.dumps({**spec().model_dump(mode="json"), "design": {"rounds": 3, "alpha": 0.0}}))
    res = CliRunner().invoke(app, ["validate", str(bad)])
    assert res.exit_code == 1
    assert "  design: alpha=0.0: must lie in (0, 0.5); fix: use e.g. 0.05" in res.output.splitlines()


def test_a_regression_reverts_and_is_a_failed_quality_record() -> None:
    a = assess(rounds_run(0.7, [85.0, 70.0, 55.0, 45.0, 35.0]), spec())
    assert a.verdict.decision == "REVERT"
    flagged = [q for q in decision_records(a, spec()) if q.check == "regression.ci.decode_tok_s" and not q.passed]
    assert len(flagged) == 4 and all(-0.35 < q.value < -0.25 for q in flagged)


def test_cost_model_predicts_neighbouring_k_and_compares_with_measurement() -> None:
    a = assess(rounds_run(1.2, [85.0, 70.0, 55.0, 45.0, 35.0]), spec())
    assert set(a.cost) == {"k3", "k5"}
    assert [r.k for r in a.cost["k3"].rows] == list(range(1, 8))
    (row,) = a.cost_rows
    assert row.arm == "k5" and row.k == 5 and row.error == pytest.approx(row.predicted_tok_s / row.measured_tok_s - 1)


def test_report_regenerates_from_duckdb_alone(tmp_path: Path) -> None:
    result = rounds_run(1.2, [85.0, 70.0, 55.0, 45.0, 35.0])
    ingest(result, tmp_path / "h.duckdb")
    res = CliRunner().invoke(app, ["report", result.run_id, "--db", str(tmp_path / "h.duckdb"),
                                   "--out", str(tmp_path / "out")])
    assert res.exit_code == 0, res.output
    report = (tmp_path / "out" / "report.md").read_text()
    for section in ("## Conditions", "## Measurement", "## Result", "## Conclusion", "## Limitations"):
        assert section in report
    assert "**PROMOTE**" in report and "predicted best k" in report
    assert (tmp_path / "out" / "acceptance_per_position.png").stat().st_size > 10_000
    assert (tmp_path / "out" / "decode_vs_concurrency.png").stat().st_size > 10_000


def test_the_no_spec_control_is_reported_beside_not_judged() -> None:
    with_control = ExperimentSpec.model_validate({
        **spec().model_dump(mode="json"),
        "arms": [*spec().model_dump(mode="json")["arms"], {"name": "nospec", "image": "cpu"}],
    })
    result = rounds_run(1.2, [85.0, 70.0, 55.0, 45.0, 35.0])
    for round_no in (1, 2, 3):  # speculation off: half the speed, same greedy output as k3
        control = rf.arm("nospec", 3, 2.0, [80.0, 60.0, 40.0]).model_copy(
            update={"name": "nospec", "k": None, "method": None, "round": round_no, "probes": [[1, 2, 3]]})
        control.cells = [c.model_copy(update={"window": c.window.model_copy(update={
            "num_drafts": None, "accepted_per_position": None, "num_accepted_tokens": None})}) for c in control.cells]
        result.arms.append(control)
    a = assess(result, with_control)
    assert a.verdict.decision == "PROMOTE"  # the control's -50% is not a regression of the candidate
    assert {c.outcome for c in a.cells if c.arm == "nospec"} == {"regression"}
    records = decision_records(a, with_control)
    assert all(q.passed for q in records if q.arm == "nospec")
    assert a.compared_probes == 3  # k5-k3, nospec-k3, k5-nospec: each pair once, not k3-nospec again


def test_an_aa_of_an_arm_without_speculation_is_judged_not_set_aside_as_a_control() -> None:
    # the calibration of the demo's baseline: nospec against nospec (it read "no candidate cells" before)
    doc = spec().model_dump(mode="json")
    doc["arms"] = [{"name": "a", "image": "cpu"}, {"name": "b", "image": "cpu"}]
    doc["baseline"] = "a"
    doc["design"] = {**doc["design"], "varies": []}
    aa = ExperimentSpec.model_validate(doc)
    assert control_arms(aa) == set()
    result = rounds_run(1.0, [85.0, 70.0, 55.0])
    result.arms = []
    for round_no in (1, 2, 3):
        for name in ("a", "b"):
            launch = rf.arm(name, 3, 2.0, [80.0, 60.0, 40.0]).model_copy(
                update={"name": name, "k": None, "method": None, "round": round_no})
            launch.cells = [c.model_copy(update={"window": c.window.model_copy(update={
                "num_drafts": None, "accepted_per_position": None, "num_accepted_tokens": None})})
                for c in launch.cells]
            result.arms.append(launch)
    a = assess(result, aa)
    assert [d.arm for d in a.arms] == ["b"]
    assert "no candidate cells at the declared load levels" not in a.verdict.all_reasons
