from pathlib import Path

import pytest
import yaml

from specwatch.calibrate import aa_spec
from specwatch.plan import plan
from specwatch.resolve import load_spec, resolve
from specwatch.spec import ExperimentSpec, SpecError, SpeculativeSpec

EXAMPLE = Path(__file__).parent.parent / "examples" / "cpu-ngram-generated.yaml"
DEMO = Path(__file__).parent.parent / "examples" / "cpu-ngram.yaml"


def write(tmp_path: Path, doc: dict) -> Path:
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def base_doc() -> dict:
    return yaml.safe_load(EXAMPLE.read_text())


def problems(tmp_path: Path, doc: dict) -> list[str]:
    with pytest.raises(SpecError) as info:
        load_spec(write(tmp_path, doc))
    return info.value.problems


def test_example_is_valid_and_builds_the_speculative_config() -> None:
    spec = load_spec(EXAMPLE)
    assert [a.name for a in spec.arms] == ["k3", "k5"]
    assert spec.sampling.temperature == 0.0
    assert spec.thresholds.noise_band == 0.05
    assert spec.arms[1].speculative.config_json() == (
        '{"method":"ngram","num_speculative_tokens":5,"prompt_lookup_max":4,"prompt_lookup_min":2}'
    )


def test_the_demo_asks_ngram_against_no_speculation_on_the_real_model() -> None:
    # issue 21 "Defaults": `make demo` runs the real model; issue 22: adaptive rounds, decided within ~20 min
    spec = load_spec(DEMO)
    assert spec.model.package == "smollm2-135m" and spec.baseline == "nospec"
    assert spec.arm("nospec").speculative is None and spec.arm("k5").speculative.k == 5
    assert (spec.design.rounds, spec.design.adaptive, spec.design.max_rounds) == (2, True, 4)
    assert set(spec.confounds()["k5"]) <= set(spec.design.varies or []) and spec.workload.protocol == "chat"


def test_unknown_field_names_the_field_and_the_fix(tmp_path: Path) -> None:
    doc = base_doc()
    doc["arms"][0]["colour"] = "red"
    (line,) = problems(tmp_path, doc)
    assert line.startswith("arms[0](k3).colour:")
    assert "'red'" in line and "fix: remove it" in line


def test_each_problem_gets_its_own_line(tmp_path: Path) -> None:
    doc = base_doc()
    doc["arms"][0]["speculative"]["k"] = 0
    doc["arms"][1]["speculative"]["k"] = "five"
    doc["workload"]["concurrency"] = "many"
    lines = problems(tmp_path, doc)
    assert len(lines) == 3
    assert any(line.startswith("arms[0](k3).speculative.k:") and "got 0" in line for line in lines)
    assert any(line.startswith("arms[1](k5).speculative.k:") and "whole number" in line for line in lines)
    assert any(line.startswith("workload.concurrency:") for line in lines)


def test_unknown_method_lists_known_ones_unless_opted_in(tmp_path: Path) -> None:
    doc = base_doc()
    doc["arms"][1]["speculative"] = {"method": "ngarm", "k": 5}
    (line,) = problems(tmp_path, doc)
    assert "unknown method 'ngarm'" in line and "ngram" in line and "allow_unknown_method" in line
    doc["arms"][1]["speculative"]["allow_unknown_method"] = True
    doc["design"] = {"varies": ["method", "k"]}
    spec = load_spec(write(tmp_path, doc))
    assert spec.arms[1].speculative.checked is False


def test_known_method_checked_strictly() -> None:
    with pytest.raises(ValueError, match="needs prompt_lookup_max"):
        SpeculativeSpec(method="ngram", k=5)
    with pytest.raises(ValueError, match="needs draft_model"):
        SpeculativeSpec(method="eagle", k=3)
    assert SpeculativeSpec(method="eagle", k=3, draft_model="/m").config_json() == (
        '{"method":"eagle","num_speculative_tokens":3,"model":"/m"}'
    )


def test_missing_model_path_is_reported(tmp_path: Path) -> None:
    doc = base_doc()
    doc["model"] = {"path": str(tmp_path / "nope")}
    (line,) = problems(tmp_path, doc)
    assert "nope" in line and "not a directory" in line


def test_relative_model_path_resolves_against_the_file(tmp_path: Path) -> None:
    (tmp_path / "ckpt").mkdir()
    doc = base_doc()
    doc["model"] = {"path": "ckpt"}
    assert load_spec(write(tmp_path, doc)).model.path == tmp_path / "ckpt"


def test_references_and_baseline_checked(tmp_path: Path) -> None:
    doc = base_doc()
    doc["arms"][0]["image"] = "missing"
    doc["baseline"] = "nobody"
    lines = problems(tmp_path, doc)
    assert any("image 'missing' is not defined" in line for line in lines)


def test_requests_per_cell_must_reach_concurrency(tmp_path: Path) -> None:
    doc = base_doc()
    doc["workload"]["requests_per_cell"] = 2
    (line,) = problems(tmp_path, doc)
    assert "requests_per_cell 2 < concurrency 4" in line


def test_min_waves_sizes_the_high_concurrency_cells(tmp_path: Path) -> None:
    """With min_waves > 1 every cell at c sends >= min_waves x c: requests_per_cell may size c=1 alone."""
    doc = base_doc()
    doc["workload"]["requests_per_cell"] = 2
    doc["workload"]["min_waves"] = 4
    wl = load_spec(write(tmp_path, doc)).workload
    assert [wl.cell_requests(c) for c in wl.concurrency] == [max(2, 4 * c) for c in wl.concurrency]


@pytest.mark.parametrize(("waves", "refused"), [(16, False), (None, True)])
def test_batched_cells_are_sized_by_their_waves_not_requests_per_cell(tmp_path: Path, waves: int | None,
                                                                      refused: bool) -> None:
    """c=16 and 64 send batched_waves x c: requests_per_cell 8 sizes c=1 and c=4 alone; with the rule
    off it would have to reach 64."""
    doc = base_doc()
    doc["workload"].update(concurrency=[1, 4, 16, 64], requests_per_cell=8, batched_waves=waves)
    if refused:
        (line,) = problems(tmp_path, doc)
        assert "requests_per_cell 8 < concurrency 64" in line
    else:
        wl = load_spec(write(tmp_path, doc)).workload
        assert [wl.cell_requests(c) for c in wl.concurrency] == [8, 8, 256, 1024]


def test_not_yaml_and_missing_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: [unclosed")
    with pytest.raises(SpecError, match="not valid YAML"):
        load_spec(bad)
    with pytest.raises(SpecError, match="file not found"):
        load_spec(tmp_path / "absent.yaml")


def test_spec_round_trips_as_a_prefect_parameter() -> None:
    spec = load_spec(EXAMPLE)
    again = ExperimentSpec.model_validate(spec.model_dump(mode="json"))
    assert again == spec


def test_single_variable_guard_lists_the_differences(tmp_path: Path) -> None:
    doc = base_doc()
    doc["images"].append({"name": "cpu-0.27", "version": "0.27.0"})
    doc["arms"][1]["image"] = "cpu-0.27"
    doc["arms"][1]["env"] = {"VLLM_CPU_OMP_THREADS_BIND": "0"}
    (line,) = problems(tmp_path, doc)
    assert "env:VLLM_CPU_OMP_THREADS_BIND, image, k" in line and "design.varies" in line
    doc["design"] = {"varies": ["k"]}
    (line,) = problems(tmp_path, doc)
    assert "arm 'k5' differs from baseline 'k3' in env:VLLM_CPU_OMP_THREADS_BIND, image" in line
    doc["design"] = {"varies": ["k", "image", "env"]}
    assert load_spec(write(tmp_path, doc)).confounds() == {"k5": ["env:VLLM_CPU_OMP_THREADS_BIND", "image", "k"]}
    doc["design"] = {"varies": ["k"], "allow_confounded": True}
    assert load_spec(write(tmp_path, doc)).design.allow_confounded


def test_no_spec_control_arm_is_not_a_confound(tmp_path: Path) -> None:
    doc = base_doc()
    doc["arms"].append({"name": "nospec", "image": "cpu-0.32"})
    spec = load_spec(write(tmp_path, doc))
    assert spec.confounds() == {"k5": ["k"], "nospec": []}


def test_ladder_and_design_checks(tmp_path: Path) -> None:
    doc = base_doc()
    doc["arms"][1]["speculative"]["fallback"] = [5, 4]
    (line,) = problems(tmp_path, doc)
    assert "repeats k=5" in line
    doc["arms"][1]["speculative"]["fallback"] = [4]
    doc["design"] = {"rounds": 4, "max_rounds": 2}
    (line,) = problems(tmp_path, doc)
    assert "max_rounds 2 < rounds 4" in line


def _docker_experiment(image: dict, launcher: str = "docker") -> dict:
    return {"name": "d", "model": {"generate": {}}, "images": [{"name": "i", "backend": "docker", **image}],
            "arms": [{"name": "a", "image": "i", "launcher": launcher,
                      "speculative": {"method": "ngram", "k": 3, "prompt_lookup_max": 4}}],
            "baseline": "a"}


@pytest.mark.parametrize(("image", "launcher", "message"), [
    ({}, "docker", "backend docker needs exactly one of ref .* or dockerfile"),
    ({"ref": "r:1", "dockerfile": "cpu", "version": "1"}, "docker", "needs exactly one of ref"),
    ({"dockerfile": "cpu"}, "docker", "dockerfile 'cpu' needs version"),
    ({"ref": "r:1"}, "vllm", "launcher docker runs container images .* the arm's launcher vllm"),
])
def test_docker_images_say_what_they_need(image: dict, launcher: str, message: str) -> None:
    with pytest.raises(SpecError, match=message):
        resolve(ExperimentSpec.model_validate(_docker_experiment(image, launcher)))


def test_a_docker_image_names_its_variant_and_version_in_the_plan() -> None:
    for image, shown in (({"dockerfile": "cpu", "version": "0.32.0"}, "Dockerfile.cpu vLLM 0.32.0"),
                         ({"ref": "vllm/vllm-openai:v0.26.0"}, "vllm/vllm-openai:v0.26.0")):
        (arm,) = plan(resolve(ExperimentSpec.model_validate(_docker_experiment(image)))).arms
        assert arm.image == shown


def test_the_flow_resolves_its_parameter_before_anything_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Prefect only parses a spec from the UI (pydantic); the flow resolves it first thing
    from flows.ab import ab

    monkeypatch.setenv("SPECWATCH_HOME", str(tmp_path))
    doc = base_doc()
    doc["images"][0]["backend"] = "nope"
    parsed = ExperimentSpec.model_validate(doc)
    with pytest.raises(SpecError, match=r"images\[0\]\(cpu-0.32\).backend: backend 'nope' is not one of"):
        ab.fn(parsed)
    assert not any(tmp_path.iterdir())  # no run dir, nothing started


def test_batched_cells_send_whole_waves_counted_from_the_file(tmp_path: Path) -> None:
    """From c=16 a closed cell sends at least batched_waves (16) whole waves: a count fixed before any
    launch, so every arm and round sends the same requests. Below 16, open loop, or off: as before."""
    doc = base_doc()
    doc["workload"].update(concurrency=[1, 4, 16, 64], requests_per_cell=100)
    wl = load_spec(write(tmp_path, doc)).workload
    assert [wl.cell_requests(c) for c in (1, 4, 16, 64, None)] == [100, 100, 256, 1024, 100]
    whole = wl.model_copy(update={"requests_per_cell": 300, "batched_waves": 4})
    assert [whole.cell_requests(c) for c in (4, 16, 64)] == [300, 304, 320]  # rounded up to whole waves of c
    off = wl.model_copy(update={"batched_waves": None, "min_waves": 2})
    assert [off.cell_requests(c) for c in (4, 16, 64)] == [100, 100, 128]
    planned = plan(load_spec(write(tmp_path, doc)))
    # the plan counts (and times) them: per round and class, 100 + 100 + 256 + 1024
    assert {a.requests for a in planned.arms} == {str(planned.rounds * len(wl.classes) * (100 + 100 + 256 + 1024))}


def test_a_duration_is_for_one_arm(tmp_path: Path) -> None:
    doc = base_doc()
    doc["workload"]["duration_s"] = 30
    (line,) = problems(tmp_path, doc)
    assert line.startswith("workload.duration_s: 30 s with 2 arms compared: a time cutoff ends each arm's cell after "
                           "different requests") and "fix: remove duration_s" in line and "\n" not in line
    doc["arms"] = doc["arms"][:1]
    doc["baseline"] = doc["arms"][0]["name"]
    one = load_spec(write(tmp_path, doc))
    assert one.workload.duration_s == 30  # one arm: nothing is compared
    with pytest.raises(SpecError) as info:  # an A/A compares its two slots: the flow resolves it before any launch
        resolve(aa_spec(one, one.baseline, 3))
    assert info.value.problems[0].startswith("workload.duration_s: 30 s with 2 arms compared")
