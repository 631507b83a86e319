"""A real container engine for tests: podman serving the Docker API on a unix socket, with a storage
root of its own (so nothing a past run built can stand in for this run's build), and a Docker
registry on loopback to push to and pull from.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from specwatch.engine import processes
from specwatch.engine.launchers import free_port

# Two podman defaults fail on these hosts (STACK_NOTES): its ulimits and crun under hybrid cgroups.
CONTAINERS_CONF = """\
[containers]
default_ulimits = []
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
"""


def _wait_for(predicate: object, what: str, log: Path, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} not up after {timeout_s:.0f}s:\n{log.read_text()[-2000:]}")
        time.sleep(0.2)


@contextlib.contextmanager
def podman_service(root: Path, insecure_registry: str, wrapper: Sequence[str] = ()) -> Iterator[str]:
    """Yield a DOCKER_HOST URL of a podman service whose images and containers live under `root`.
    `wrapper` prefixes the service's command (e.g. `nice -n 19`: its builds and containers inherit it)."""
    if shutil.which("podman") is None:
        raise RuntimeError("podman is not installed: `make engine` (apt-get install podman runc) installs it")
    root.mkdir(parents=True, exist_ok=True)
    (root / "containers.conf").write_text(CONTAINERS_CONF)
    (root / "registries.conf").write_text(f'[[registry]]\nlocation = "{insecure_registry}"\ninsecure = true\n')
    sock = root / "podman.sock"
    env = {**os.environ, "CONTAINERS_CONF": str(root / "containers.conf"),
           "CONTAINERS_REGISTRIES_CONF": str(root / "registries.conf")}
    storage = ["--root", str(root / "storage"), "--runroot", str(root / "run"), "--tmpdir", str(root / "tmp")]
    log = root / "service.log"
    proc = processes.spawn([*wrapper, "podman", *storage, "system", "service", "--time=0", f"unix://{sock}"], env, log,
                           tracked=False)
    url = f"unix://{sock}"
    try:
        _wait_for(lambda: sock.exists() or proc.poll() is not None, "podman service", log)
        yield url
    finally:
        # Containers first (a test may have failed mid-run), then the service, then its storage.
        subprocess.run(["podman", *storage, "rm", "--all", "--force", "--time", "0"], env=env,
                       capture_output=True, timeout=120, check=False)
        processes.stop(proc, grace_s=10.0)
        subprocess.run(["podman", *storage, "system", "reset", "--force"], env=env, capture_output=True,
                       timeout=120, check=False)
        subprocess.run(["umount", str(root / "storage" / "overlay")], capture_output=True, check=False)
        shutil.rmtree(root, ignore_errors=True)


@contextlib.contextmanager
def loopback_registry(root: Path, port: int | None = None) -> Iterator[str]:
    """Debian's docker-registry on 127.0.0.1; yields its host:port."""
    if shutil.which("docker-registry") is None:
        raise RuntimeError("docker-registry is not installed: `make engine` (apt-get install docker-registry)")
    port = port or free_port()
    root.mkdir(parents=True, exist_ok=True)
    config = root / "config.yml"
    config.write_text(f"version: 0.1\nstorage:\n  filesystem:\n    rootdirectory: {root / 'data'}\n"
                      f"http:\n  addr: 127.0.0.1:{port}\n")
    log = root / "registry.log"
    proc = processes.spawn(["docker-registry", "serve", str(config)], dict(os.environ), log, tracked=False)
    try:
        import httpx

        def up() -> bool:
            try:
                return httpx.get(f"http://127.0.0.1:{port}/v2/", timeout=1).status_code == 200
            except httpx.HTTPError:
                return proc.poll() is not None

        _wait_for(up, "docker-registry", log)
        yield f"127.0.0.1:{port}"
    finally:
        processes.stop(proc, grace_s=5.0)
