"""Each registry takes an entry a test lists itself, and the one wiring point then uses it: an image
backend, a launcher (specwatch_testing.throwaway_launcher: one file, listed with one line) and a
request protocol, checked by resolve, shown by `specwatch validate --plan` and run for real against
the fake vLLM server.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from cli.app import app
from specwatch.bench.prompts import Prompt
from specwatch.bench.protocols import PROTOCOLS, Completions
from specwatch.bench.protocols import register as register_protocol
from specwatch.bench.runner import InProcess
from specwatch.engine.arm import run_arm
from specwatch.engine.images.registry import BACKENDS, backend_for
from specwatch.engine.launchers import LaunchContext
from specwatch.engine.launchers.registry import LAUNCHERS
from specwatch.records import ImageRef
from specwatch.resolve import resolve
from specwatch.spec import ArmSpec, ExperimentSpec, ImageSpec, SamplingSpec, SpecError
from specwatch_testing import throwaway_launcher
from specwatch_testing.experiments import ANY_HOST


class FixtureBackend:
    """An 'image' that is this interpreter, which has the fake server installed."""

    name = "fixture"
    containers = False
    knows_package = False
    launcher = None

    def check_image(self, spec: ImageSpec, on_disk: bool) -> str | None:
        return None

    def check_arm(self, arm: ArmSpec, spec: ImageSpec) -> str | None:
        return None

    def describe(self, spec: ImageSpec) -> str:
        return f"this interpreter ({sys.executable})"

    def package(self, spec: ImageSpec) -> str | None:
        return None

    def ensure(self, spec: ImageSpec) -> ImageRef:
        return ImageRef(name=spec.name, backend=self.name, vllm_version="fixture", python=Path(sys.executable))

    def built(self, spec: ImageSpec) -> ImageRef | None:
        return self.ensure(spec)


class TaggedCompletions(Completions):
    """`/v1/completions`, but every body it wrote is kept, so the test sees the protocol was used."""

    name = "tagged-completions"
    bodies: list[dict[str, Any]] = []

    def body(self, model: str, prompt: Prompt, max_tokens: int, sampling: SamplingSpec) -> dict[str, Any]:
        body = super().body(model, prompt, max_tokens, sampling)
        self.bodies.append(body)
        return body


@pytest.fixture
def registered(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setitem(BACKENDS, "fixture", FixtureBackend())
    # the one line a new launcher needs: its entry in specwatch/engine/launchers/registry.py
    monkeypatch.setitem(LAUNCHERS, throwaway_launcher.PLUGIN.name, throwaway_launcher.PLUGIN)
    register_protocol(TaggedCompletions())
    try:
        yield
    finally:
        PROTOCOLS.pop("tagged-completions")


def document() -> dict[str, Any]:
    return {
        "name": "registry-test",
        "model": {"generate": {}, "served_name": "demo"},
        "images": [{"name": "fx", "backend": "fixture"}],
        "arms": [{"name": "a", "image": "fx", "launcher": "throwaway",
                  "speculative": {"method": "ngram", "k": 3, "prompt_lookup_max": 4}, "boot_timeout_s": 30}],
        "baseline": "a",
        "design": {"rounds": 1, "probes": 1, "probe_tokens": 8},
        "thresholds": ANY_HOST,  # the host's other work is tested in test_interference.py
        "workload": {"protocol": "tagged-completions", "prompt_classes": ["code"], "prompt_tokens": 32,
                     "max_tokens": 16, "concurrency": [1], "requests_per_cell": 2, "warmup_requests": 1},
    }


def spec() -> ExperimentSpec:
    return ExperimentSpec.model_validate(document())


def test_names_outside_the_registries_are_refused_with_the_known_ones() -> None:
    with pytest.raises(SpecError, match="backend 'fixture' is not one of docker, endpoint, python, venv"):
        resolve(spec())


def test_a_registered_backend_launcher_and_protocol_run_an_arm(registered: None, tmp_path: Path) -> None:
    s = spec()
    image = backend_for(s.images[0]).ensure(s.images[0])
    assert image.backend == "fixture"
    ctx = LaunchContext(model_dir=tmp_path, served_name="demo", arm_dir=tmp_path / "arm")
    started_before = len(throwaway_launcher.PLUGIN.started)
    # in this process: a spawned measuring process would not have the test's registrations
    result = run_arm(s.arms[0], s, image, ctx, None, namespace="reg", runner=InProcess())
    assert result.status == "ok", result.reason
    assert len(throwaway_launcher.PLUGIN.started) == started_before + 1 and result.launch is not None
    assert result.launch.launcher == "throwaway" and result.launch.k_confirmed == 3
    (cell,) = result.cells
    assert cell.requests_ok == 2 and not cell.rejected
    # warm-up, probe and cell requests all went through the registered protocol
    assert len(TaggedCompletions.bodies) >= 4


def test_a_registered_launcher_is_checked_and_planned(registered: None, tmp_path: Path) -> None:
    # its own check, at the arm's place in the file
    unchecked = document()
    del unchecked["arms"][0]["speculative"]
    with pytest.raises(SpecError) as err:
        resolve(ExperimentSpec.model_validate(unchecked))
    assert err.value.problems == ["arms[0](a): arm 'a': launcher throwaway needs speculative"]
    # `specwatch validate --plan`: the plan's table and the exact launch are the launcher's
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(document()))
    res = CliRunner().invoke(app, ["validate", "--plan", str(path)])
    assert res.exit_code == 0, res.output
    assert "throwaway" in res.output and "this interpreter" in res.output
    assert "-m specwatch_testing.fake_vllm --port '<port>' --served-model-name demo" in res.output
