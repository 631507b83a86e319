"""The A/A experiment a calibration runs (`specwatch calibrate`): one arm in both slots of every round.

It is an ordinary A/B of two identical arms, so the A/B flow runs it with everything an A/B has (the
counterbalanced order, the gates, resume, the report); the variance it measured is then stored
(specwatch/store/priors.py). Built here from a resolved experiment, before anything runs; a bad
request is one line.
"""

from __future__ import annotations

from specwatch.design import differences, signature
from specwatch.spec import ArmSpec, ExperimentSpec

MIN_ROUNDS = 2  # an sd needs two rounds (one degree of freedom); a few more make it worth pooling
SLOTS = ("a", "b")


class CalibrationError(ValueError):
    """A calibration that cannot measure a launch variance; the message is one line with its fix."""


def aa_spec(spec: ExperimentSpec, arm: str | None, rounds: int) -> ExperimentSpec:
    """The A/A experiment: `arm` in both slots (named `<arm>.a`, `<arm>.b`), or, without `arm`, the file's
    two arms, which must be identical apart from their names. `rounds` rounds, no adaptive rounds."""
    if rounds < MIN_ROUNDS:
        raise CalibrationError(f"--rounds {rounds}: a variance needs at least {MIN_ROUNDS} rounds (df = rounds - 1); "
                               "fix: --rounds 3 or more")
    names = [a.name for a in spec.arms]
    if arm is not None:
        if arm not in names:
            raise CalibrationError(f"--arm {arm!r} is not an arm of {spec.name}; fix: use one of {', '.join(names)}")
        one = spec.arm(arm)
        arms = [one.model_copy(update={"name": f"{arm}.{slot}"}) for slot in SLOTS]
    else:
        _check_identical(spec)
        arms = list(spec.arms)
    design = spec.design.model_copy(update={"rounds": rounds, "adaptive": False, "max_rounds": None,
                                            "varies": None, "allow_confounded": False, "variance_from": None})
    # Through model_validate, not model_copy: the copy must pass the spec's own checks.
    return ExperimentSpec.model_validate({**spec.model_dump(), "arms": [a.model_dump() for a in arms],
                                          "baseline": arms[0].name, "design": design.model_dump()})


def slots(spec: ExperimentSpec) -> tuple[str, str]:
    """The A/A's two arm names, slot A (the baseline) first."""
    other = next(a.name for a in spec.arms if a.name != spec.baseline)
    return spec.baseline, other


def _check_identical(spec: ExperimentSpec) -> None:
    names = [a.name for a in spec.arms]
    if len(names) != 2:
        raise CalibrationError(f"arms {names}: an A/A calibration has two slots; fix: pass --arm NAME to run one "
                               "arm in both")
    first, second = spec.arms
    diffs = _differences(spec, first, second)
    if diffs:
        raise CalibrationError(f"arms {first.name!r} and {second.name!r} differ in {', '.join(diffs)}: an A/A runs "
                               f"the same arm in every slot; fix: pass --arm {first.name} (or --arm {second.name}) "
                               "to calibrate one of them")


def _differences(spec: ExperimentSpec, a: ArmSpec, b: ArmSpec) -> list[str]:
    diffs = differences(signature(a, spec.image(a.image)), signature(b, spec.image(b.image)))
    return diffs + (["host"] if a.host != b.host else [])
