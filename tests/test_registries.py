"""Each registry takes an entry a test registers itself, and the one wiring point then uses it:
an image backend, a launcher and a request protocol, run for real against the fake vLLM server.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from specwatch.bench.prompts import Prompt
from specwatch.bench.protocols import PROTOCOLS, Completions
from specwatch.bench.protocols import register as register_protocol
from specwatch.bench.runner import InProcess
from specwatch.engine import images, launchers
from specwatch.engine.arm import run_arm
from specwatch.engine.handle import ServerHandle
from specwatch.engine.launchers import LaunchContext, free_port, spawn_server
from specwatch.records import ImageRef
from specwatch.resolve import resolve
from specwatch.spec import ArmSpec, ExperimentSpec, ImageSpec, SamplingSpec, SpecError
from specwatch_testing.server import fake_vllm_argv


class FixtureBackend:
    """An 'image' that is this interpreter, which has the fake server installed."""

    name = "fixture"

    def ensure(self, spec: ImageSpec) -> ImageRef:
        return ImageRef(name=spec.name, backend=self.name, vllm_version="fixture", python=Path(sys.executable))


class FixtureLauncher:
    """Starts the fake vLLM server with the arm's speculative config."""

    name = "fixture"
    boot_log_has_config = False
    started: list[int] = []

    def start(self, arm: ArmSpec, image: ImageRef, ctx: LaunchContext) -> ServerHandle:
        port = free_port(ctx.host)
        assert arm.speculative is not None
        argv = fake_vllm_argv(port, ["--served-model-name", ctx.served_name, "--step-ms", "5",
                                     "--spec-config", arm.speculative.config_json()])
        self.started.append(port)
        return spawn_server(argv, arm, image, ctx, port, self.name)


class TaggedCompletions(Completions):
    """`/v1/completions`, but every body it wrote is kept, so the test sees the protocol was used."""

    name = "tagged-completions"
    bodies: list[dict[str, Any]] = []

    def body(self, model: str, prompt: Prompt, max_tokens: int, sampling: SamplingSpec) -> dict[str, Any]:
        body = super().body(model, prompt, max_tokens, sampling)
        self.bodies.append(body)
        return body


@pytest.fixture
def registered() -> Iterator[None]:
    images.register(FixtureBackend())
    launchers.register(FixtureLauncher())
    register_protocol(TaggedCompletions())
    try:
        yield
    finally:
        images.BACKENDS.pop("fixture")
        launchers.LAUNCHERS.pop("fixture")
        PROTOCOLS.pop("tagged-completions")


def spec() -> ExperimentSpec:
    return ExperimentSpec.model_validate({
        "name": "registry-test",
        "model": {"generate": {}, "served_name": "demo"},
        "images": [{"name": "fx", "backend": "fixture"}],
        "arms": [{"name": "a", "image": "fx", "launcher": "fixture",
                  "speculative": {"method": "ngram", "k": 3, "prompt_lookup_max": 4}, "boot_timeout_s": 30}],
        "baseline": "a",
        "design": {"blocks": 1, "probes": 1, "probe_tokens": 8},
        "workload": {"protocol": "tagged-completions", "prompt_classes": ["code"], "prompt_tokens": 32,
                     "max_tokens": 16, "concurrency": [1], "requests_per_cell": 2, "warmup_requests": 1},
    })


def test_names_outside_the_registries_are_refused_with_the_known_ones() -> None:
    with pytest.raises(SpecError, match="backend 'fixture' is not one of docker, endpoint, python, venv"):
        resolve(spec())


def test_a_registered_backend_launcher_and_protocol_run_an_arm(registered: None, tmp_path: Path) -> None:
    s = spec()
    image = images.backend_for(s.images[0]).ensure(s.images[0])
    assert image.backend == "fixture"
    ctx = LaunchContext(model_dir=tmp_path, served_name="demo", arm_dir=tmp_path / "arm")
    started_before = len(FixtureLauncher.started)
    # in this process: a spawned measuring process would not have the test's registrations
    result = run_arm(s.arms[0], s, image, ctx, None, namespace="reg", runner=InProcess())
    assert result.status == "ok", result.reason
    assert len(FixtureLauncher.started) == started_before + 1 and result.launch is not None
    assert result.launch.launcher == "fixture" and result.launch.k_confirmed == 3
    (cell,) = result.cells
    assert cell.requests_ok == 2 and not cell.rejected
    # warm-up, probe and cell requests all went through the registered protocol
    assert len(TaggedCompletions.bodies) >= 4
