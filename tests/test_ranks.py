"""Multi-rank arms before anything starts: env files rendered from templates, the rank-invariant
check, and the plan's exact per-rank launches, pinned by a golden file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from cli.app import app
from specwatch.ranks import RankError, check_invariants, render
from specwatch.resolve import load_spec, resolve
from specwatch.spec import ExperimentSpec, SpecError

REPO = Path(__file__).resolve().parents[1]
CLUSTER = REPO / "examples" / "cluster-4rank-docker.yaml"
GOLDEN = Path(__file__).parent / "golden" / "cluster-4rank-docker.plan.txt"


def cluster(tmp_path: Path, edit: object) -> Path:
    # a JSON round trip unshares the YAML aliases: an edit lands in one arm and one rank only
    doc = json.loads(json.dumps(yaml.safe_load(CLUSTER.read_text())))
    edit(doc)  # type: ignore[operator]
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_validate_plan_prints_each_ranks_docker_run_and_env_file() -> None:
    result = CliRunner().invoke(app, ["validate", "--plan", str(CLUSTER)])
    assert result.exit_code == 0, result.output
    launches = result.output[result.output.index("arm k5 rank 1"):]
    assert launches == GOLDEN.read_text(), "the plan changed: review it, then regenerate the golden file"
    # workers first, the head last; k reaches every rank's env from the arm's one declared k
    order = [line.split(" (")[0] for line in launches.splitlines() if line.startswith("arm ")]
    assert order[:4] == ["arm k5 rank 1", "arm k5 rank 2", "arm k5 rank 3", "arm k5 rank 0"]
    assert launches.count("NUM_SPECULATIVE_TOKENS=7") == 4 and launches.count("NCCL_NVLS_ENABLE=0") == 8


def test_a_rank_at_another_k_is_refused_before_launch(tmp_path: Path) -> None:
    def plant(doc: dict) -> None:
        doc["arms"][1]["ranks"][2]["env"] = {**doc["arms"][1]["ranks"][2]["env"], "NUM_SPECULATIVE_TOKENS": "6"}

    with pytest.raises(SpecError) as err:
        load_spec(cluster(tmp_path, plant))
    (problem,) = err.value.problems
    assert "rank-invariant settings differ between ranks (env:NUM_SPECULATIVE_TOKENS: ranks[0]='7'" in problem
    assert "ranks[2]='6'" in problem and "deadlocks NCCL" in problem and problem.startswith("(file): arm 'k7'")


def test_a_template_variable_without_a_value_names_the_field(tmp_path: Path) -> None:
    def plant(doc: dict) -> None:
        doc["arms"][0]["ranks"][1]["env"] = {"NCCL_SOCKET_IFNAME": "{nic}"}

    with pytest.raises(SpecError) as err:
        load_spec(cluster(tmp_path, plant))
    assert "ranks[1].env.NCCL_SOCKET_IFNAME uses {nic}, which has no value; known: {address}" in err.value.problems[0]


def test_flags_count_as_rank_invariant_settings() -> None:
    spec = load_spec(CLUSTER)
    arm = spec.arms[0]
    ranks = render(arm, {h.name: h for h in spec.hosts})
    check_invariants(arm, ranks)
    odd = arm.model_copy(update={"ranks": [*arm.ranks[:3], arm.ranks[3].model_copy(
        update={"args": ["--max-model-len", "4096"]})]})
    with pytest.raises(RankError, match=r"--max-model-len: .*ranks\[3\]='4096'"):
        check_invariants(odd, render(odd, {h.name: h for h in spec.hosts}))


def test_one_head_exactly() -> None:
    doc = yaml.safe_load(CLUSTER.read_text())
    doc["arms"][0]["ranks"][0]["role"] = "worker"
    with pytest.raises(SpecError, match="ranks need exactly one role: head"):
        resolve(ExperimentSpec.model_validate(doc))


def test_docker_ranks_need_a_host_each(tmp_path: Path) -> None:
    def plant(doc: dict) -> None:
        doc["arms"][0]["ranks"][2]["host"] = "spark-1"

    with pytest.raises(SpecError) as err:
        load_spec(cluster(tmp_path, plant))
    assert "ranks share host 'spark-1'; docker ranks run on the host network" in err.value.problems[0]


def test_a_host_with_its_own_model_path_gets_it_in_its_ranks_args() -> None:
    from specwatch.engine.launchers import LaunchContext
    from specwatch.engine.launchers.vllm import server_args
    from specwatch.engine.platforms import UNKNOWN

    doc = json.loads(json.dumps(yaml.safe_load(CLUSTER.read_text())))
    doc["hosts"][2]["model_path"] = "/mnt/nvme/DeepSeek-V4-Flash-DSpark-0731"
    spec = ExperimentSpec.model_validate(doc)
    ranks = render(spec.arms[0], {h.name: h for h in spec.hosts})
    ctx = LaunchContext(model_dir=Path("/models/DeepSeek-V4-Flash-DSpark-0731"), served_name="d", arm_dir=Path("."),
                        ranks=tuple(ranks))
    models = {r.host: server_args(spec.arms[0], UNKNOWN, ctx, 8000, r, ("192.0.2.10", 29501))[1] for r in ranks}
    default = "/models/DeepSeek-V4-Flash-DSpark-0731"
    assert models == {"spark-0": default, "spark-1": default, "spark-2": "/mnt/nvme/DeepSeek-V4-Flash-DSpark-0731",
                      "spark-3": default}
