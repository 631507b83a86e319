"""One planted regression from the nightly's decided A/B to triage: the candidate server is 1.6x slower, the
nightly (the regression flow, a real Prefect API) decides REVERT and opens an alert; its notification waits
in the outbox while the team's webhook (a Prefect webhook block) is down and arrives on the next night, when
it is up; the alert is acknowledged from the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from specwatch.engine.launchers import free_port
from specwatch_testing.cli import specwatch
from specwatch_testing.experiments import LOADED_HOST, endpoint_ab
from specwatch_testing.records import query
from specwatch_testing.server import run_fake_vllm
from specwatch_testing.webhook import webhook_receiver

SPEC = json.dumps({"method": "ngram", "num_speculative_tokens": 3})


def server(*extra: str) -> list[str]:
    return ["--served-model-name", "demo", "--spec-config", SPEC, "--accept-probs", "0.99,0.98,0.97",
            "--step-ms", "10", *extra]


@pytest.fixture(scope="module")
def nights(prefect_api: None, tmp_path_factory: pytest.TempPathFactory):
    from prefect.blocks.webhook import Webhook

    from flows.regression import regression

    tmp = tmp_path_factory.mktemp("alerts-nightly")
    port = free_port()
    # the token in the path must never be stored or printed
    Webhook(method="POST", url=f"http://127.0.0.1:{port}/hook/SECRET-TOKEN").save("alerts-hook", overwrite=True)
    db = tmp / "h.duckdb"
    with run_fake_vllm(server()) as base, run_fake_vllm(server("--slowdown", "1.6")) as cand:
        # A round more than a decision needs: a loaded host may reject a launch's cell (a stalled client's
        # chunks arrive in one burst), and the night must still decide (CI stop 29 lost one and ended Completed).
        doc = endpoint_ab("nightly-ab", base, cand, design={"rounds": 4, "probes": 0},
                          workload={"prompt_classes": ["code"], "prompt_tokens": 32, "max_tokens": 64,
                                    "concurrency": [1], "requests_per_cell": 3, "warmup_requests": 1})
        doc["thresholds"] = LOADED_HOST
        experiment = tmp / "nightly.yaml"
        experiment.write_text(yaml.safe_dump(doc))
        first = regression(str(experiment), db=str(db), notify_block="alerts-hook", notify_format="json",
                           return_state=True)
        pending = query(db, "select event, attempts, sent_at is null, last_error from outbox order by 1")
        with webhook_receiver(port) as hook:
            second = regression(str(experiment), db=str(db), notify_block="alerts-hook", notify_format="json",
                                return_state=True)
    return first, second, pending, db, hook.received


def test_the_decided_revert_opens_one_alert_over_both_nights(nights) -> None:
    first, second, _, db, _ = nights
    assert (first.name, second.name) == ("Regression", "Regression"), (first.message, second.message)
    assert query(db, "select outcome from decisions order by started_at") == [("REVERT",), ("REVERT",)]
    ((series, direction, runs, state, summary, effect),) = query(
        db, "select series, direction, runs, state, summary, effect from alerts")
    assert (series, direction, runs, state) == ("nightly-ab: cand vs base", "regression", 2, "untriaged")
    assert summary.startswith("REVERT nightly-ab: cand vs base: decode tok/s") and -0.5 < effect < -0.25


def test_the_notification_waited_while_the_hook_was_down_and_arrived_when_it_was_up(nights) -> None:
    _, _, pending, db, received = nights
    # night 1: the hook down, the alert's notification and the run's regression hint kept, one attempt each
    assert sorted((e, a, p) for e, a, p, _ in pending) == [("hint", 1, True), ("opened", 1, True)]
    assert all("SECRET-TOKEN" not in (err or "") and err for *_, err in pending)
    # night 2: it is up; the pending ones and night 2's hint are sent, each once
    assert query(db, "select event, attempts, sent_at is not null, sent_to from outbox order by notification_id") == [
        ("opened", 2, True, "block alerts-hook"), ("hint", 2, True, "block alerts-hook"),
        ("hint", 1, True, "block alerts-hook")]
    opened = [m for m in received if m["event"] == "opened"]
    assert len(opened) == 1 and len(received) == 3
    ((alert_id,),) = query(db, "select alert_id from alerts")
    assert opened[0]["alert_id"] == alert_id and opened[0]["links"]["alert"].endswith(f"/alerts/{alert_id}")


def test_the_alert_is_acknowledged_from_the_cli(nights, tmp_path: Path) -> None:
    _, _, _, db, _ = nights
    ((alert_id,),) = query(db, "select alert_id from alerts")
    listed = specwatch("alerts", "--db", str(db), home=tmp_path)
    assert listed.returncode == 0 and "nightly-ab: cand vs base" in listed.stdout and "untriaged" in listed.stdout
    acked = specwatch("alerts", "ack", str(alert_id), "--note", "bisecting the image", "--by", "ana", "--db", str(db),
                      home=tmp_path)
    assert acked.returncode == 0, acked.stderr
    assert query(db, "select state from alerts") == [("acknowledged",)]
    assert query(db, "select changed_by, note from alert_events where state = 'acknowledged'") == [
        ("ana", "bisecting the image")]
