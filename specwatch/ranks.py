"""Multi-rank arms: one server spread over ranks (tensor parallel across hosts), each rank with
its own env rendered from templates. Pure: specwatch.resolve checks with it and launchers start from it.

A mismatch in a rank-invariant setting (the speculative config, the model, parallel sizes, ...)
deadlocks NCCL with no error (vLLM PR #44718 exists because of it), so ranks that differ in one
are refused before anything starts, naming the keys that differ.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from specwatch import templates
from specwatch.spec.arms import LOCAL

if TYPE_CHECKING:
    from specwatch.spec.arms import ArmSpec, HostSpec

# Flags whose values every rank must share (extend here; arms add env names with rank_invariant_env).
RANK_INVARIANT_FLAGS = (
    "--speculative-config",
    "--model", "--dtype", "--quantization",
    "--max-model-len", "--max-num-seqs",
    "--tensor-parallel-size", "-tp", "--pipeline-parallel-size", "-pp",
    "--kv-cache-dtype",
    "--enforce-eager", "--compilation-config",
)
# Env names that carry the same settings into a team's own launch scripts.
RANK_INVARIANT_ENV = ("NUM_SPECULATIVE_TOKENS", "SPECULATIVE_CONFIG", "SPEC_CONFIG", "MODEL", "DTYPE",
                      "MAX_MODEL_LEN", "MAX_NUM_SEQS", "TP_SIZE", "TENSOR_PARALLEL_SIZE", "KV_CACHE_DTYPE")
# Set on every rank unless the arm sets it: NVLink multicast off (the GPU hosts' notes require it).
DEFAULT_RANK_ENV = {"NCCL_NVLS_ENABLE": "0"}


class RankError(ValueError):
    """A rank list that cannot launch; the message names the field and the fix."""


@dataclass(frozen=True)
class SshRoute:
    """How a host is reached over SSH (specwatch.engine.remote connects with it)."""

    host: str
    address: str
    user: str
    port: int = 22
    key_file: Path | None = None
    known_hosts: Path | None = None
    workdir: str = "/tmp/specwatch"
    docker_host: str | None = None


def route_to(host: HostSpec | None) -> SshRoute | None:
    if host is None or host.ssh is None:
        return None
    s = host.ssh
    return SshRoute(host.name, host.address, s.user, s.port, s.key_file, s.known_hosts, host.workdir,
                    host.docker_host)


@dataclass(frozen=True)
class Rank:
    index: int  # the node rank: the head is 0, workers follow in the order listed
    role: str
    host: str
    address: str
    netns: str | None
    env: dict[str, str] = field(default_factory=dict)
    args: list[str] = field(default_factory=list)
    listed: int = 0  # position in the arm's `ranks:` list (for error messages)
    ssh: SshRoute | None = None
    model_path: Path | None = None  # the checkpoint on the rank's host, when its path differs there

    def invariants(self, spec_config: str, extra_env: tuple[str, ...] = ()) -> dict[str, str]:
        found = {"speculative_config": spec_config}
        for i, word in enumerate(self.args):
            flag, eq, value = word.partition("=")
            if flag in RANK_INVARIANT_FLAGS:
                found[flag] = value if eq else (self.args[i + 1] if i + 1 < len(self.args)
                                                and not self.args[i + 1].startswith("-") else "true")
        for name in (*RANK_INVARIANT_ENV, *extra_env):
            if name in self.env:
                found[f"env:{name}"] = self.env[name]
        return found

    @property
    def env_hash(self) -> str:
        return hashlib.sha256(json.dumps(self.env, sort_keys=True).encode()).hexdigest()[:16]


def render(arm: ArmSpec, hosts: dict[str, HostSpec]) -> list[Rank]:
    """The arm's ranks with their env and args rendered, the head first."""
    if not arm.ranks:
        return []
    heads = [i for i, r in enumerate(arm.ranks) if r.role == "head"]
    if len(heads) != 1:
        raise RankError(f"arm {arm.name!r}: ranks need exactly one role: head (found {len(heads)}); "
                        "mark the rank that serves the API as head, the others as worker")
    order = heads + [i for i, r in enumerate(arm.ranks) if r.role != "head"]
    head_host = arm.ranks[heads[0]].host
    out = []
    for node_rank, listed in enumerate(order):
        spec = arm.ranks[listed]
        if spec.host != LOCAL and spec.host not in hosts:
            raise RankError(f"arm {arm.name!r}: ranks[{listed}].host {spec.host!r} is not defined; "
                            f"hosts are {sorted({LOCAL, *hosts})}")
        host = hosts.get(spec.host)
        values = {
            "k": str(arm.k or 0),
            "spec_config": arm.speculative.config_json() if arm.speculative else "",
            "rank": str(node_rank),
            "nnodes": str(len(arm.ranks)),
            "host": spec.host,
            "address": host.address if host else "127.0.0.1",
            "head_address": hosts[head_host].address if head_host in hosts else "127.0.0.1",
        }
        env = dict(DEFAULT_RANK_ENV)
        for name, template in spec.env.items():
            try:
                env[name] = templates.fill(template, values)
            except templates.TemplateError as exc:
                raise RankError(f"arm {arm.name!r}: ranks[{listed}].env.{name} {exc}") from None
        out.append(Rank(node_rank, spec.role, spec.host, values["address"], host.netns if host else None,
                        env, list(spec.args), listed, route_to(host), host.model_path if host else None))
    return out


def check_invariants(arm: ArmSpec, ranks: list[Rank]) -> None:
    """Refuse ranks whose rank-invariant settings differ; the message lists the keys that do."""
    spec_config = arm.speculative.config_json() if arm.speculative else ""
    seen = [r.invariants(spec_config, tuple(arm.rank_invariant_env)) for r in ranks]
    digests = {hashlib.sha256(json.dumps(s, sort_keys=True).encode()).hexdigest() for s in seen}
    if len(digests) <= 1:
        return
    keys = sorted({k for s in seen for k in s if len({x.get(k) for x in seen}) > 1})
    detail = "; ".join(f"{k}: " + ", ".join(f"ranks[{r.listed}]={s.get(k)!r}" for r, s in zip(ranks, seen, strict=True))
                       for k in keys)
    raise RankError(f"arm {arm.name!r}: rank-invariant settings differ between ranks ({detail}); a mismatch "
                    "deadlocks NCCL: make them equal on every rank")


MASTER_PORT = 29501  # vLLM's default --master-port


def multinode_args(rank: Rank, nnodes: int, head_address: str, master_port: int | str = MASTER_PORT) -> list[str]:
    """vLLM's native multi-node arguments for one rank (`--headless` on workers: they serve no API)."""
    argv = ["--nnodes", str(nnodes), "--node-rank", str(rank.index), "--master-addr", head_address,
            "--master-port", str(master_port)]
    return argv + (["--headless"] if rank.role == "worker" else [])
