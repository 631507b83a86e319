"""The container engine through the Docker API: Docker itself, or podman serving that API.
`DOCKER_HOST` names it, as for the docker CLI. Every failure is one line naming what to fix.
"""

from __future__ import annotations

import collections
import json
import os
import subprocess
import threading
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import docker
from docker.errors import APIError, DockerException, ImageNotFound, NotFound
from docker.models.containers import Container
from docker.models.images import Image

DEFAULT_HOST = "unix:///var/run/docker.sock"


class EngineError(Exception):
    """The container engine cannot do what was asked; the message is one actionable line."""


def _where() -> str:
    return os.environ.get("DOCKER_HOST", DEFAULT_HOST)


def client(timeout_s: float = 600.0) -> docker.DockerClient:
    try:
        engine = docker.DockerClient(base_url=_where(), timeout=int(timeout_s))
        engine.ping()
    except DockerException as exc:
        raise EngineError(f"container engine at {_where()} is not answering ({type(exc).__name__}); start it "
                          "(dockerd, or `podman system service`) or point DOCKER_HOST at it") from None
    return engine


def find_image(engine: docker.DockerClient, ref: str) -> Image | None:
    try:
        return engine.images.get(ref)
    except ImageNotFound:
        return None


def pull(engine: docker.DockerClient, ref: str) -> Image:
    try:
        return engine.images.pull(ref)
    except (APIError, NotFound) as exc:
        reason = str(getattr(exc, "explanation", None) or exc).splitlines()[0]
        raise EngineError(f"image {ref!r} cannot be pulled ({reason}); check the reference and that its registry "
                          "is reachable") from None


def build(engine: docker.DockerClient, context: Path, dockerfile: str, tag: str, build_args: Mapping[str, str],
          log_path: Path) -> Image:
    """Build `context` into `tag`, every line of the build into `log_path`; a failure quotes its last lines."""
    tail: collections.deque[str] = collections.deque(maxlen=8)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    error: str | None = None
    with open(log_path, "w") as log:
        try:
            # host network: RUN steps reach the package index the way the host does
            for chunk in engine.api.build(path=str(context), dockerfile=dockerfile, tag=tag, buildargs=dict(build_args),
                                          network_mode="host", rm=True, forcerm=True, decode=True):
                text = chunk.get("stream") or chunk.get("status") or ""
                if text:
                    log.write(text if text.endswith("\n") else text + "\n")
                    tail.extend(line for line in text.splitlines() if line.strip())
                if "error" in chunk:
                    error = str(chunk["error"]).strip()
                    log.write(f"ERROR: {error}\n")
        except APIError as exc:
            error = str(exc.explanation or exc)
    if error is not None:
        last = " | ".join(list(tail)[-5:])
        raise EngineError(f"building {tag} from {context / dockerfile} failed: {error} (last lines: {last}; "
                          f"full log {log_path})")
    image = find_image(engine, tag)
    if image is None:
        raise EngineError(f"building {tag} reported success but the engine has no such image; see {log_path}")
    return image


def import_rootfs(engine: docker.DockerClient, tarball: Path, tag: str) -> Image:
    """A rootfs tarball as an image (how a base image is made where no registry is reachable)."""
    repository, _, version = tag.rpartition(":")
    answer = engine.api.import_image(src=str(tarball), repository=repository, tag=version,
                                     changes=['CMD ["/bin/bash"]', "ENV LANG=C.UTF-8"])
    # podman tags an import `:latest` whatever tag it is given: tag the imported id explicitly.
    image_id = json.loads(answer.strip().splitlines()[-1]).get("id") if isinstance(answer, str) else None
    image = find_image(engine, image_id or tag)
    if image is None:
        raise EngineError(f"importing {tarball} as {tag} left no image (the engine answered {answer!r:.200})")
    image.tag(repository, version)
    return image


def run_once(engine: docker.DockerClient, ref: str, argv: Sequence[str], mounts: Iterable[tuple[Path, bool]] = (),
             environment: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`argv` in a throwaway container of `ref`; mounts are (host path, writable) at the same path inside."""
    volumes = {str(p): {"bind": str(p), "mode": "rw" if rw else "ro"} for p, rw in mounts}
    container = engine.containers.run(ref, list(argv), entrypoint=[], detach=True, network_mode="host",
                                      volumes=volumes, environment=dict(environment or {}))
    try:
        code = int(container.wait()["StatusCode"])
        out = container.logs(stdout=True, stderr=False).decode(errors="replace")
        err = container.logs(stdout=False, stderr=True).decode(errors="replace")
    finally:
        container.remove(force=True)
    return subprocess.CompletedProcess(list(argv), code, out, err)


def follow_logs(container: Container, log_path: Path) -> threading.Thread:
    """Copy the container's output into `log_path` while it runs (the thread ends with the container)."""

    def copy() -> None:
        with open(log_path, "ab") as out:
            try:
                for chunk in container.logs(stream=True, follow=True):
                    out.write(chunk)
                    out.flush()
            except (APIError, DockerException, OSError):
                pass  # the container is gone: nothing more to copy

    thread = threading.Thread(target=copy, name=f"logs-{container.name}", daemon=True)
    thread.start()
    return thread


class ContainerPython:
    """A script run by an image's python3 in a throwaway container: the files it reads (absolute
    paths among its arguments) are mounted read-only, `writable` read-write, all at the same paths."""

    def __init__(self, ref: str) -> None:
        self.ref = ref

    def run(self, argv: list[str], env: dict[str, str], writable: Path, timeout_s: float
            ) -> subprocess.CompletedProcess[str]:
        reads = {Path(a) for a in argv if a.startswith("/") and Path(a).exists()} - {writable}
        mounts = [(p, False) for p in sorted(reads)] + [(writable, True)]
        return run_once(client(timeout_s), self.ref, ["python3", *argv], mounts, env)

    def __str__(self) -> str:
        return f"the python3 of image {self.ref}"
