"""What makes a launch variance comparable between runs (`VarianceKey`), and the one-line error of a stored
variance a run cannot use. Shared by the `variance_priors` table (specwatch/store/priors.py) and the
exported files (specwatch/store/prior_file.py)."""

from __future__ import annotations

from dataclasses import astuple, dataclass, fields


class PriorError(ValueError):
    """A stored variance this run cannot use; one line with the field, the value, what differs and the fix."""


@dataclass(frozen=True)
class VarianceKey:
    """What makes a launch variance comparable between runs."""

    platform: str  # specwatch.engine.platforms: cpu, gpu; unknown for an endpoint
    hardware: str  # the GPU model on gpu, else the CPU model
    hardware_count: int  # GPUs on gpu, else CPU cores
    image: str  # the baseline arm's image digest (an endpoint has none: its URL)
    model: str  # the checkpoint's config.json sha256, "+gguf:<sha256>" for a packaged model; "none" for an endpoint


def key_differences(there: VarianceKey, here: VarianceKey) -> list[str]:
    """'<part> <value there> there, <value here> here' for each key part that differs."""
    return [f"{f.name} {a!r} there, {b!r} here"
            for f, a, b in zip(fields(VarianceKey), astuple(there), astuple(here), strict=True) if a != b]
