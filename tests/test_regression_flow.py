"""The scheduled cycle against history: the first run has no baseline, a later real slowdown
(the same test server with its steps 1.6x slower) ends Failed("Regression") and shows up in
the `regressions` view."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from specwatch_testing.experiments import LOADED_HOST
from specwatch_testing.records import query as rows
from specwatch_testing.server import run_fake_vllm
from specwatch_testing.webhook import webhook_receiver

SPEC = json.dumps({"method": "ngram", "num_speculative_tokens": 3})


def server(*extra: str) -> list[str]:
    # A first token 150 ms after admission: the few ms a loaded CI host adds to it stay far inside the band
    # (at the default 20 ms they were -10.6%, CI stop 29), while --slowdown leaves it alone.
    return ["--served-model-name", "demo", "--spec-config", SPEC, "--accept-probs", "0.99,0.98,0.97",
            "--step-ms", "6", "--ttft-ms", "150", *extra]


def experiment_file(tmp: Path, url: str) -> Path:
    ngram = {"method": "ngram", "k": 3, "prompt_lookup_max": 4}
    doc = {
        "name": "nightly", "model": {"generate": {}, "served_name": "demo"},
        "images": [{"name": "img", "backend": "endpoint", "url": url}],
        "arms": [{"name": "main", "image": "img", "speculative": ngram}],
        "baseline": "main", "design": {"rounds": 1, "probes": 1, "probe_tokens": 8},
        # wide enough for one launch on a loaded host, narrow enough for the planted -37.5%
        "thresholds": {**LOADED_HOST, "noise_band": 0.2},
        "workload": {"prompt_classes": ["code"], "prompt_tokens": 32, "max_tokens": 160, "concurrency": [1],
                     "requests_per_cell": 4, "warmup_requests": 1},
    }
    path = tmp / "nightly.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.fixture(scope="module")
def nights(prefect_api: None, tmp_path_factory: pytest.TempPathFactory):
    from prefect.blocks.webhook import Webhook

    from flows.regression import regression

    tmp = tmp_path_factory.mktemp("nightly")
    db = str(tmp / "h.duckdb")
    states = []
    with webhook_receiver() as hook:
        Webhook(method="POST", url=hook.url()).save("team-hook", overwrite=True)
        for extra in ([], [], ["--slowdown", "1.6"]):
            with run_fake_vllm(server(*extra)) as url:
                states.append(regression(str(experiment_file(tmp, url)), db=db, notify_block="team-hook",
                                         return_state=True))
    return states, db, hook.received



def test_first_run_has_no_baseline_and_the_second_passes(nights) -> None:
    states, db, _ = nights
    assert [s.type.value for s in states[:2]] == ["COMPLETED", "COMPLETED"], [s.message for s in states[:2]]
    checks = rows(db, "select r.started_at, count(q.check_name) from runs r left join quality_results q "
                      "on q.run_id = r.run_id and q.check_name like 'history.%' group by 1 order by 1")
    assert [n for _, n in checks][:2] == [0, 3 + 3]  # decode, TTFT, MAL + one per position


def test_a_real_slowdown_fails_the_run_as_a_regression(nights) -> None:
    states, db, received = nights
    third = states[2]
    assert third.type.value == "FAILED" and third.name == "Regression"
    assert "decode tok/s" in third.message
    (row,) = rows(db, "select metric, baseline_value, value, delta_pct, \"check\" from regressions "
                      "where \"check\" = 'history.decode_tok_s'")
    assert row[0] == "decode_tok_s_median" and -50 < row[3] < -25  # 1/1.6 - 1 = -37.5%
    # speed changed, acceptance did not: nothing else is flagged
    assert rows(db, "select \"check\", metric, delta_pct from regressions "
                    "where \"check\" <> 'history.decode_tok_s'") == []
    # the team's webhook heard about it, and only about it
    assert len(received) == 1 and "regressed" in received[0]["text"]
