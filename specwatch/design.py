"""The single-variable guard: what an arm changes relative to the baseline arm.

Change one variable per experiment (measurement rule 8): one public "k=7 beats k=5" report
changed seven. An arm's signature lists everything that can change a measurement; two
arms may differ only in what the experiment declares it varies.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from specwatch.spec import ArmSpec, ImageSpec

# What `design.varies` may name; `env:NAME` narrows env to one variable.
VARIABLES = ("k", "image", "method", "args", "launcher", "env", "ranks")


def signature(arm: ArmSpec, image: ImageSpec) -> dict[str, object]:
    spec = arm.speculative
    sig: dict[str, object] = {
        "image": (image.backend, image.package, image.version, image.url, image.ref, image.dockerfile,
                  image.python if image.backend == "python" else None),
        "launcher": (arm.launcher, arm.command),
        "args": tuple(arm.args),
        "method": None if spec is None else (
            spec.method, spec.prompt_lookup_max, spec.prompt_lookup_min, spec.draft_model,
            json.dumps(spec.extra, sort_keys=True),
        ),
        "k": None if spec is None else spec.k,
        # templates, not rendered values: `{k}` in a rank env is the arm's k, already compared above
        "ranks": tuple((r.host, r.role, tuple(sorted(r.env.items())), tuple(r.args)) for r in arm.ranks),
    }
    sig.update({f"env:{name}": value for name, value in arm.env.items()})
    return sig


def differences(a: dict[str, object], b: dict[str, object]) -> list[str]:
    return sorted(key for key in a.keys() | b.keys() if a.get(key) != b.get(key))


def undeclared(diffs: list[str], varies: list[str]) -> list[str]:
    """The differences `varies` does not cover (`env` covers every `env:NAME`)."""
    return [d for d in diffs if d not in varies and not (d.startswith("env:") and "env" in varies)]
