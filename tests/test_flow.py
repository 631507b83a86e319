"""The A/B flow end to end on a real Prefect API, with two already-running test servers (endpoint images)."""

from __future__ import annotations

import json

import pytest

from specwatch.spec import ExperimentSpec
from specwatch_testing.experiments import endpoint_ab
from specwatch_testing.records import query as q
from specwatch_testing.server import run_fake_vllm

SPEC = json.dumps({"method": "ngram", "num_speculative_tokens": 3})


def server(*extra: str) -> list[str]:
    return ["--served-model-name", "demo", "--spec-config", SPEC, "--accept-probs", "0.99,0.98,0.97",
            "--step-ms", "6", *extra]


def experiment(base_url: str, cand_url: str, rounds: int = 1, **workload: object) -> ExperimentSpec:
    return ExperimentSpec.model_validate(endpoint_ab(
        "flow-test", base_url, cand_url, design={"rounds": rounds, "probes": 2, "probe_tokens": 16},
        workload={"prompt_classes": ["code", "json"], "prompt_tokens": 48, "max_tokens": 256,
                  "concurrency": [1, 2], "requests_per_cell": 4, "warmup_requests": 1, **workload}))


@pytest.fixture(scope="module")
def planted(prefect_api: None, tmp_path_factory: pytest.TempPathFactory):
    from flows.ab import ab

    db = tmp_path_factory.mktemp("db") / "h.duckdb"
    # The candidate's steps take 1.6x as long: a real slowdown the checks must flag. Acceptance is high
    # and ~260 drafts per cell, so its sampling noise (~1%) stays far inside the 5% band.
    with run_fake_vllm(server()) as base, run_fake_vllm(server("--slowdown", "1.6")) as cand:
        outcome = ab(experiment(base, cand), db=str(db))
    return outcome, db



def test_planted_slowdown_is_flagged_in_every_cell(planted) -> None:
    outcome, db = planted
    # one round: no interval exists without a stored variance, the single-boot band check flags it and the
    # sequential decision ends INCONCLUSIVE at its maximum of one round
    assert outcome.exit_code == 3 and outcome.headline == "INCONCLUSIVE; a regression flagged"
    flagged = q(db, "select arm, concurrency, prompt_class, value / baseline_value - 1 from quality_results "
                    "where check_name = 'regression.decode_tok_s' and not passed order by concurrency, prompt_class")
    assert [(a, c, p) for a, c, p, _ in flagged] == [("cand", 1, "code"), ("cand", 1, "json"),
                                                     ("cand", 2, "code"), ("cand", 2, "json")]
    assert all(-0.5 < d < -0.25 for *_, d in flagged)  # 1/1.6 - 1 = -37.5%
    # a single run's GE flag is a hint, not an alert: only a decided comparison opens one
    assert outcome.alerts == [] and q(db, "select count(*) from alerts") == [(0,)]
    assert q(db, "select outcome from decisions") == [("INCONCLUSIVE",)]


def test_acceptance_is_not_flagged_when_only_speed_changed(planted) -> None:
    _, db = planted
    failed = q(db, "select check_name from quality_results where not passed and check_name <> "
                   "'regression.decode_tok_s'")
    assert failed == []
    checked = q(db, "select count(*) from quality_results where check_name = 'regression.acceptance_length'")
    assert checked == [(4,)]


def test_run_row_records_exit_code_and_report(planted) -> None:
    outcome, db = planted
    assert q(db, "select exit_code, flow_run_id is not null from runs") == [(3, True)]
    assert q(db, "select arm, launcher, k_confirmed, k_source from arms order by arm") == [
        ("base", "endpoint", 3, "metrics"), ("cand", "endpoint", 3, "metrics")]
    report = (outcome.run_dir / "report.md").read_text()
    assert "**Verdict: INCONCLUSIVE; a regression flagged**" in report
    for section in ("## Conditions", "## Measurement", "## Result", "## Conclusion", "## Limitations"):
        assert section in report
    assert "regression.decode_tok_s" in report


@pytest.fixture(scope="module")
def planted_rounds(prefect_api: None, tmp_path_factory: pytest.TempPathFactory):
    from flows.ab import ab

    db = tmp_path_factory.mktemp("db") / "h.duckdb"
    with run_fake_vllm(server()) as base, run_fake_vllm(server("--slowdown", "1.6")) as cand:
        spec = experiment(base, cand, rounds=3, prompt_classes=["code"], concurrency=[1], max_tokens=96)
        outcome = ab(spec, db=str(db))
    return outcome, db


def test_rounds_alternate_and_the_sequential_verdict_reverts(planted_rounds) -> None:
    outcome, db = planted_rounds
    launches = q(db, "select arm, round from arms order by started_at")
    assert launches == [("base", 1), ("cand", 1), ("cand", 2), ("base", 2), ("cand", 3), ("base", 3)]
    (row,) = q(db, "select passed, value, detail from quality_results where check_name = 'regression.ci.decode_tok_s'")
    assert row[0] is False and -0.5 < row[1] < -0.25 and "over 3 round(s)" in row[2]
    # with rounds, the interval replaces the single-boot band check
    assert q(db, "select count(*) from quality_results where check_name = 'regression.decode_tok_s'") == [(0,)]
    assert q(db, "select count(*) from quality_results where check_name = 'correctness.greedy_match'") == [(0,)]
    assert outcome.exit_code == 3 and outcome.headline.startswith("REVERT")
    # the decided REVERT opened one alert for the change, with its notification waiting in the outbox
    (opened,) = outcome.alerts
    assert opened.startswith("alert #1 opened: REVERT ") and "cand vs base: decode tok/s -" in opened
    assert q(db, "select state, direction, first_run_id = last_run_id from alerts") == [
        ("untriaged", "regression", True)]
    assert q(db, "select event, sent_at is null from outbox") == [("opened", True)]
    # the cell's outcome is its table row; the reasons are the arm's sequential decision
    assert [r.verdict for r in outcome.rows if r.arm == "cand"] == ["regression"]
    (reason,) = outcome.reasons
    assert reason.startswith("cand: decode_tok_s composite -") and "below -5%" in reason
    report = (outcome.run_dir / "report.md").read_text()
    assert "`cand` vs `base`: **REVERT**" in report and "rounds: 3; fixed design: 3 round(s), one look" in report
    assert "![acceptance_per_position.png]" in report and (outcome.run_dir / "decode_vs_concurrency.png").stat().st_size
