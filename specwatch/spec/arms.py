"""`arms:` and `hosts:`: what each arm runs (its speculation, launcher, ranks) and where."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, PositiveFloat, PositiveInt, field_serializer, model_validator

from specwatch.redact import redact_argv, redact_env, redact_words
from specwatch.spec.base import Strict, Tokens, cap

# Known speculative methods and the fields each needs. Forks add methods before
# upstream does (DOMAIN.md), so an unknown method is allowed only with an explicit
# opt-in per arm; a typo without the opt-in stays an error.
KNOWN_METHODS: dict[str, tuple[str, ...]] = {
    "ngram": ("prompt_lookup_max",),
    "suffix": (),
    "eagle": ("draft_model",),
    "eagle3": ("draft_model",),
    "draft_model": ("draft_model",),
    "mtp": (),
    "deepseek_mtp": (),
    "dspark": (),
}


# `draft_model: early-exit`: the experiment's own early-exit draft (model.draft_layers), whose path
# exists only once the model step has written it; the arm's launch gets that path (engine/arm.py).
EARLY_EXIT = "early-exit"

# k sizes per-position arrays in the client, the records and the test server
# the host an arm or rank runs on unless it names one of hosts:
LOCAL = "local"
_K = cap(256, "drafters propose at most tens of tokens per step")


class SpeculativeSpec(Strict):
    method: str
    k: Annotated[PositiveInt, _K] = Field(description="num_speculative_tokens")
    prompt_lookup_max: Annotated[PositiveInt, Tokens] | None = None
    prompt_lookup_min: Annotated[PositiveInt, Tokens] | None = None
    draft_model: str | None = Field(default=None, description="the draft checkpoint's path, or early-exit: "
                                    "the draft model.draft_layers writes")
    extra: dict[str, Any] = Field(default_factory=dict, description="more keys for --speculative-config")
    allow_unknown_method: bool = False
    fallback: list[Annotated[PositiveInt, _K]] = Field(
        default_factory=list, description="k-ladder: values tried in order when the server rejects k at startup"
    )

    @model_validator(mode="after")
    def _method_known(self) -> SpeculativeSpec:
        required = KNOWN_METHODS.get(self.method)
        if required is None:
            if not self.allow_unknown_method:
                known = ", ".join(sorted(KNOWN_METHODS))
                raise ValueError(
                    f"unknown method {self.method!r}; use one of {known}, "
                    "or set allow_unknown_method: true to run a fork's method unchecked"
                )
            return self
        if self.k in self.fallback:
            raise ValueError(f"fallback {self.fallback} repeats k={self.k}; list only the values to try instead")
        missing = [f for f in required if getattr(self, f) is None]
        if missing:
            raise ValueError(f"method {self.method!r} needs {', '.join(missing)}")
        if (
            self.prompt_lookup_min is not None
            and self.prompt_lookup_max is not None
            and self.prompt_lookup_min > self.prompt_lookup_max
        ):
            raise ValueError("prompt_lookup_min must be <= prompt_lookup_max")
        return self

    @property
    def checked(self) -> bool:
        return self.method in KNOWN_METHODS

    @property
    def early_exit(self) -> bool:
        """The draft is the experiment's early-exit draft, named, not yet a path."""
        return self.draft_model == EARLY_EXIT

    def with_draft(self, path: Path) -> SpeculativeSpec:
        """This speculation with its early-exit draft resolved to the written checkpoint."""
        return self.model_copy(update={"draft_model": str(path)}) if self.early_exit else self

    def config_json(self) -> str:
        """The `--speculative-config` value vLLM receives."""
        cfg: dict[str, Any] = {"method": self.method, "num_speculative_tokens": self.k}
        for key in ("prompt_lookup_max", "prompt_lookup_min"):
            if getattr(self, key) is not None:
                cfg[key] = getattr(self, key)
        if self.draft_model is not None:
            cfg["model"] = self.draft_model
        cfg.update(self.extra)
        return json.dumps(cfg, separators=(",", ":"))


class SshSpec(Strict):
    user: str
    port: Annotated[int, Field(ge=1, le=65_535)] = 22
    key_file: Path | None = None
    known_hosts: Path | None = Field(default=None, description="default ~/.ssh/known_hosts; the key must match")


class HostSpec(Strict):
    """A machine servers run on: over SSH (`ssh:`), or a network namespace of this machine (`netns:`)."""

    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9_.-]+$")]
    address: str = Field(description="where the host is reached: the head's master address, the client's URL")
    netns: str | None = Field(default=None, description="run its ranks in this network namespace (ip netns exec)")
    ssh: SshSpec | None = None
    workdir: str = Field(default="/tmp/specwatch", description="with ssh: where server logs are kept on the host")
    docker_host: str | None = Field(default=None, description="with ssh: DOCKER_HOST for the docker CLI there")
    model_path: Path | None = Field(default=None, description="the checkpoint's path on this host (default: "
                                    "model.path)")

    @model_validator(mode="after")
    def _one_way_there(self) -> HostSpec:
        if self.ssh is not None and self.netns is not None:
            raise ValueError(f"host {self.name!r}: set ssh (a remote machine) or netns (a namespace here), not both")
        return self


class RankSpec(Strict):
    host: str = Field(default=LOCAL, description="a host name from hosts:, or local")
    role: Literal["head", "worker"] = "worker"
    env: dict[str, str] = Field(default_factory=dict, description="templates: {k} {spec_config} {rank} {nnodes} "
                                "{host} {address} {head_address}")
    args: list[str] = Field(default_factory=list, description="extra server args for this rank")

    # JSON is what leaves the process (results.json, DuckDB, reports, Prefect's flow-run parameters):
    # secrets stay in memory only. A run gets its secrets from the file or the environment, never a record.
    @field_serializer("env", when_used="json")
    def _env_json(self, env: dict[str, str]) -> dict[str, str]:
        return redact_env(env)

    @field_serializer("args", when_used="json")
    def _args_json(self, args: list[str]) -> list[str]:
        return redact_argv(args)


class ArmSpec(Strict):
    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9_.-]+$")]
    image: str
    speculative: SpeculativeSpec | None = Field(default=None, description="null = speculation off")
    launcher: str = Field(default="vllm", description="a launcher (specwatch/engine/launchers/registry.py)")
    command: str | None = Field(
        default=None,
        description="template for launcher=command: {python} {port} {model} {served_name} {k} {spec_config} {args}",
    )
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    boot_timeout_s: PositiveFloat = 600.0
    host: str = Field(default=LOCAL, description="the host a single-server arm runs on (hosts:, or local)")
    ranks: list[RankSpec] = Field(default_factory=list, description="one server over several ranks; empty = one")
    rank_invariant_env: list[str] = Field(default_factory=list,
                                          description="more env names every rank must share (see specwatch.ranks)")

    @field_serializer("env", when_used="json")
    def _env_json(self, env: dict[str, str]) -> dict[str, str]:
        return redact_env(env)  # as RankSpec's

    @field_serializer("args", when_used="json")
    def _args_json(self, args: list[str]) -> list[str]:
        return redact_argv(args)

    @field_serializer("command", when_used="json")
    def _command_json(self, command: str | None) -> str | None:
        return None if command is None else redact_words(command)

    @property
    def k(self) -> int | None:
        return self.speculative.k if self.speculative else None

    def with_k(self, k: int | None) -> ArmSpec:
        """This arm at another rung of its k-ladder (the ladder then ends there)."""
        if self.speculative is None or k == self.k:
            return self
        assert k is not None
        return self.model_copy(update={"speculative": self.speculative.model_copy(update={"k": k, "fallback": []})})

    def with_draft(self, path: Path) -> ArmSpec:
        """This arm with its early-exit draft (if it names one) resolved to `path`."""
        if self.speculative is None or not self.speculative.early_exit:
            return self
        return self.model_copy(update={"speculative": self.speculative.with_draft(path)})

    @property
    def ladder(self) -> list[int | None]:
        """k, then the fallback values tried when the server refuses k at startup."""
        return [self.speculative.k, *self.speculative.fallback] if self.speculative else [None]


