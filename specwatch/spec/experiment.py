"""The experiment file as a whole: its parts, and the rules that tie them together."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, field_validator, model_validator

from specwatch.design import differences, signature, undeclared
from specwatch.spec.arms import LOCAL, ArmSpec, HostSpec
from specwatch.spec.base import Strict
from specwatch.spec.design import DesignSpec
from specwatch.spec.images import ImageSpec
from specwatch.spec.model import ModelSpec
from specwatch.spec.sweep import SweepSpec
from specwatch.spec.verdict import Thresholds, VerdictSpec
from specwatch.spec.workload import SamplingSpec, WorkloadSpec


class ExperimentSpec(Strict):
    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9_.-]+$")]
    description: str = ""
    model: ModelSpec
    images: Annotated[list[ImageSpec], Field(min_length=1)]
    arms: Annotated[list[ArmSpec], Field(min_length=1)]
    baseline: str
    hosts: list[HostSpec] = Field(default_factory=list, description="machines ranks run on (besides local)")
    workload: WorkloadSpec = WorkloadSpec()
    sampling: SamplingSpec = SamplingSpec()
    thresholds: Thresholds = Thresholds()
    design: DesignSpec = DesignSpec()
    verdict: VerdictSpec = VerdictSpec()
    sweep: SweepSpec | None = Field(default=None, description="a context-length sweep (specwatch sweep)")

    @field_validator("images")
    @classmethod
    def _unique_images(cls, images: list[ImageSpec]) -> list[ImageSpec]:
        require_unique("image", [i.name for i in images])
        return images

    @field_validator("arms")
    @classmethod
    def _unique_arms(cls, arms: list[ArmSpec]) -> list[ArmSpec]:
        require_unique("arm", [a.name for a in arms])
        return arms

    @model_validator(mode="after")
    def _references(self) -> ExperimentSpec:
        images = {i.name: i for i in self.images}
        for arm in self.arms:
            if arm.image not in images:
                raise ValueError(f"arm {arm.name!r}: image {arm.image!r} is not defined; images are {sorted(images)}")
        hosts = {h.name: h for h in self.hosts}
        for arm in self.arms:
            if arm.host != LOCAL and arm.host not in hosts:
                raise ValueError(f"arm {arm.name!r}: host {arm.host!r} is not defined; hosts are "
                                 f"{sorted({LOCAL, *hosts})}")
        if self.baseline not in {a.name for a in self.arms}:
            raise ValueError(f"baseline {self.baseline!r} is not an arm; arms are {[a.name for a in self.arms]}")
        return self

    @property
    def context_limit(self) -> tuple[int, str] | None:
        """The context the server will have, where the file already says it: (tokens, which field)."""
        if self.model.max_model_len is not None:
            return self.model.max_model_len, "model.max_model_len"
        if self.model.generate is not None:
            return self.model.generate.max_position_embeddings, "model.generate.max_position_embeddings"
        return None  # a checkpoint's own maximum: known after boot, where a depth that does not fit is skipped

    def check_depths_fit(self) -> None:
        """ValueError where a sweep depth plus max_tokens is beyond the context the file gives the server."""
        limit = self.context_limit
        if self.sweep is None or self.sweep.depths is None or limit is None:
            return
        tokens, source = limit
        out = self.workload.max_tokens
        over = [d for d in self.sweep.depths if d + out > tokens]
        if over:
            raise ValueError(f"sweep.depths: depth {over[0]} + max_tokens {out} = {over[0] + out} is beyond "
                             f"max_model_len {tokens} ({source}); fix: drop depths above {tokens - out} "
                             f"or raise {source}")

    def confounds(self) -> dict[str, list[str]]:
        """Per arm, what it changes relative to the baseline (control arms: besides speculation)."""
        base = self.arm(self.baseline)
        base_sig = signature(base, self.image(base.image))
        out = {}
        for arm in self.arms:
            if arm.name == self.baseline:
                continue
            diffs = differences(base_sig, signature(arm, self.image(arm.image)))
            if arm.speculative is None:  # the no-spec control differs in speculation by definition
                diffs = [d for d in diffs if d not in ("k", "method")]
            out[arm.name] = diffs
        return out

    def check_single_variable(self) -> None:
        """ValueError where the arms differ from the baseline in more than the declared variable."""
        if self.design.allow_confounded:
            return
        confounds = self.confounds()
        if self.design.varies is None:
            changed = sorted({d for diffs in confounds.values() for d in diffs})
            if len(changed) > 1:
                raise ValueError(
                    f"arms differ from the baseline in {', '.join(changed)}: change one variable per experiment, "
                    "declare it in design.varies, or set design.allow_confounded: true"
                )
            return
        for arm, diffs in confounds.items():
            extra = undeclared(diffs, self.design.varies)
            if extra:
                raise ValueError(
                    f"arm {arm!r} differs from baseline {self.baseline!r} in {', '.join(extra)}, which "
                    f"design.varies {self.design.varies} does not declare; make the arms equal there or set "
                    "design.allow_confounded: true (every report then carries a warning)"
                )

    def arm(self, name: str) -> ArmSpec:
        return next(a for a in self.arms if a.name == name)

    def image(self, name: str) -> ImageSpec:
        return next(i for i in self.images if i.name == name)

    @property
    def served_name(self) -> str:
        return self.model.served_name or self.name


def require_unique(kind: str, names: list[str]) -> None:
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ValueError(f"{kind} names must be unique; repeated: {', '.join(dupes)}")

