"""Remote hosts over SSH, for real: an sshd on loopback, a separate user with its own home. A
command arm's server is started on that host in its own process group, benchmarked at the host's
address, and stopped there; an unreachable host and a host key that does not match are one line."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from specwatch.engine import processes
from specwatch.engine.arm import run_arm
from specwatch.engine.launchers import LaunchContext
from specwatch.engine.remote import Remote, RemoteError
from specwatch.ranks import route_to
from specwatch.records import ImageRef
from specwatch.spec import ExperimentSpec
from specwatch_testing.experiments import ANY_HOST
from specwatch_testing.sshd import Sshd, fake_vllm_on

SERVE = ("{remote_python} {remote_script} --port {{port}} --host {{host}} --served-model-name {{served_name}} "
         "--spec-config {{spec_config}} --step-ms 5")


@pytest.fixture
def server(sshd_host: Sshd) -> Sshd:
    return sshd_host


def experiment(s: Sshd, known_hosts: Path | None = None, port: int | None = None) -> ExperimentSpec:
    python, script = fake_vllm_on(s)
    return ExperimentSpec.model_validate({
        "name": "remote", "model": {"generate": {}, "served_name": "demo"},
        "hosts": [{"name": "box", "address": s.address, "ssh": {
            "user": s.user, "port": port or s.port, "key_file": str(s.key_file),
            "known_hosts": str(known_hosts or s.known_hosts)}}],
        "images": [{"name": "here", "backend": "python", "python": sys.executable}],
        "arms": [{"name": "a", "image": "here", "launcher": "command", "host": "box",
                  "command": SERVE.format(remote_python=python, remote_script=script),
                  "speculative": {"method": "ngram", "k": 3, "prompt_lookup_max": 4}, "boot_timeout_s": 60}],
        "baseline": "a",
        "design": {"rounds": 1, "probes": 1, "probe_tokens": 8},
        "thresholds": ANY_HOST,  # the host's other work is tested in test_interference.py
        "workload": {"prompt_classes": ["code"], "prompt_tokens": 32, "max_tokens": 16, "concurrency": [1],
                     "requests_per_cell": 2, "warmup_requests": 1},
    })


def launch(spec: ExperimentSpec, tmp_path: Path):  # type: ignore[no-untyped-def]
    host = spec.hosts[0]
    ctx = LaunchContext(model_dir=tmp_path, served_name="demo", arm_dir=tmp_path / "arm", host=host.address,
                        ssh=route_to(host), launch_name="remote-a-b1")
    image = ImageRef(name="here", backend="python", python=Path(sys.executable))
    return run_arm(spec.arms[0], spec, image, ctx, None, namespace="remote")


def test_a_command_arm_runs_on_the_remote_host_as_its_user(server: Sshd, tmp_path: Path) -> None:
    result = launch(experiment(server), tmp_path)
    assert result.status == "ok", result.reason
    (cell,) = result.cells
    assert cell.requests_ok == 2 and not cell.rejected
    assert result.launch is not None and result.launch.k_confirmed == 3
    log = (tmp_path / "arm" / "server.log").read_text()  # fetched from the host when the server stopped
    assert "Uvicorn running" in log or "Application startup complete" in log, log[-500:]
    remote = Remote(route_to(experiment(server).hosts[0]))  # type: ignore[arg-type]
    code, out, _ = remote.run("id -un; pgrep -u swremote -f '[f]ake_vllm.py' || true")  # [f]: not this shell
    assert out.split()[0] == "swremote" and out.split()[1:] == []  # ran as the host's user, and is gone
    assert not [key for key in processes._LIVE if isinstance(key, tuple) and key[0] == "remote"]


def test_a_host_key_that_does_not_match_is_refused(server: Sshd, tmp_path: Path) -> None:
    wrong = tmp_path / "known_hosts"
    other = tmp_path / "other"
    import subprocess

    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    wrong.write_text(f"[127.0.0.1]:{server.port} {other.with_suffix('.pub').read_text().split()[0]} "
                     f"{other.with_suffix('.pub').read_text().split()[1]}\n")
    result = launch(experiment(server, known_hosts=wrong), tmp_path)
    assert result.status == "failed" and "its host key does not match" in (result.reason or "")
    assert "\n" not in (result.reason or "")


def test_an_unreachable_host_is_one_line(server: Sshd, tmp_path: Path) -> None:
    from specwatch.engine.launchers import free_port

    spec = experiment(server, port=free_port())
    with pytest.raises(RemoteError, match=r"host box \(127\.0\.0\.1:\d+\) is unreachable over SSH"):
        Remote(route_to(spec.hosts[0])).run("true")  # type: ignore[arg-type]
    result = launch(spec, tmp_path)
    assert result.status == "failed" and "is unreachable over SSH" in (result.reason or "")


def test_a_remote_orphan_is_found_and_stopped_over_ssh(server: Sshd, tmp_path: Path) -> None:
    from specwatch.engine import orphans
    from specwatch.engine.launchers import free_port, start_process
    from specwatch.engine.launchers.registry import stoppers

    python, script = fake_vllm_on(server)
    route = route_to(experiment(server).hosts[0])
    ctx = LaunchContext(model_dir=tmp_path, served_name="demo", arm_dir=tmp_path / "arm", run_id="dead-remote",
                        launch_name="dead-remote-a-b1", ssh=route)
    member = start_process([python, script, "--port", str(free_port())], {}, tmp_path / "arm" / "server.log", ctx,
                           address=server.address, port=None, ssh=route)
    processes.untrack(("remote", "box", member.pid))  # type: ignore[attr-defined]  # as if its flow was killed
    assert route is not None
    remote = Remote(route)
    assert remote.alive(member.pid)  # type: ignore[attr-defined]
    lines = [x for x in orphans.sweep(stoppers()) if "dead-remote" in x]
    assert lines == [f"stopped orphan process group {member.pid} on box of run dead-remote"]  # type: ignore[attr-defined]
    assert not remote.alive(member.pid)  # type: ignore[attr-defined]
