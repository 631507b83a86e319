"""One launch of one arm: start its server, confirm its k, benchmark it, stop it. A failed arm is a
recorded outcome with its reason, never an exception out of here.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from datetime import UTC, datetime
from pathlib import Path

import httpx

from specwatch.bench.cell import aborted_cell
from specwatch.bench.client import BenchError, BenchTarget
from specwatch.bench.gates import Gates
from specwatch.bench.metrics import MetricsSnapshot
from specwatch.bench.runner import CellRunner, CellsAborted, Isolated, prepare, probe
from specwatch.engine import gpu
from specwatch.engine.checkpoint import arm_constraint_violations
from specwatch.engine.handle import ServerHandle
from specwatch.engine.hostload import HostSampler, contamination, gpu_watch
from specwatch.engine.launchers import BootExit, LaunchContext, LaunchError
from specwatch.engine.launchers.registry import LAUNCHERS, launcher_for
from specwatch.engine.placement import client_on
from specwatch.engine.platforms import platform_of
from specwatch.engine.ready import ExitedBeforeReady, NotReady, wait_healthy
from specwatch.records import ArmResult, CellResult, CheckpointFacts, ImageRef
from specwatch.spec import EARLY_EXIT, ArmSpec, ExperimentSpec, Thresholds

log = logging.getLogger("specwatch.arm")
_K_IN_LOG = re.compile(r"num_spec_tokens=(\d+)")
_KV_IN_LOG = re.compile(r"KV cache size: ([\d,]+) tokens")


def wait_ready(handle: ServerHandle, timeout_s: float, poll_s: float = 1.0) -> float:
    """Boot time until /health answers; LaunchError (BootExit if a member died) otherwise."""
    try:
        boot_s = wait_healthy(f"{handle.base_url}/health", timeout_s, handle.exited, poll_s)
    except ExitedBeforeReady:
        dead = handle.dead()
        who = "server" if dead is None or dead.role == "server" else f"{dead.role} rank on {dead.host}"
        raise BootExit(f"{who} exited with code {handle.exited()} during boot; "
                       f"log: {handle.log_tail(member=dead)}") from None
    except NotReady:
        raise LaunchError(f"server not ready after {timeout_s:.0f}s (boot_timeout_s); log: {handle.log_tail()}") \
            from None
    # A port taken between choosing and binding it: whoever answered /health is not this arm's server.
    if taken := handle.foreign_listeners():
        raise LaunchError(f"{'; '.join(taken)} holds the arm's port, so /health was answered by another "
                          "server; nothing was measured against it (free the port, or rerun: a new free "
                          f"port is chosen per launch); log: {handle.log_tail()}")
    return boot_s


def k_from_log(log_path: Path | None) -> int | None:
    """vLLM logs its resolved config at boot: `SpeculativeConfig(method='ngram', ..., num_spec_tokens=5)`."""
    if log_path is None or not log_path.exists():
        return None
    found = _K_IN_LOG.findall(log_path.read_text(errors="replace"))
    return int(found[-1]) if found else None


def confirm_k(arm: ArmSpec, handle: ServerHandle, snapshot: MetricsSnapshot) -> None:
    """Record the k the server really runs (boot log, else /metrics positions); mismatch fails the arm."""
    launcher = LAUNCHERS.get(handle.record.launcher)
    handle.sync_logs()
    from_log = k_from_log(handle.record.log_path) if launcher and launcher.boot_log_has_config else None
    k: int | None
    if from_log is not None:
        k, source = from_log, "boot_log"
    elif snapshot.positions:
        k, source = snapshot.positions, "metrics"
    else:
        k, source = None, None
    handle.record = handle.record.model_copy(update={"k_confirmed": k, "k_source": source})
    if arm.k is not None and k != arm.k:
        seen = "no speculative positions" if k is None else f"k={k} (from {source})"
        raise LaunchError(f"arm asks for k={arm.k} but the server runs {seen}")
    if arm.k is None and k:
        raise LaunchError(f"arm has speculation off but the server runs k={k} (from {source})")


def kv_from_log(log_path: Path | None) -> int | None:
    """vLLM logs its KV-cache capacity at boot: `GPU KV cache size: 1,234,560 tokens` (CPU: `CPU KV cache size`)."""
    if log_path is None or not log_path.exists():
        return None
    found = _KV_IN_LOG.findall(log_path.read_text(errors="replace"))
    return int(found[-1].replace(",", "")) if found else None


def record_kv_capacity(handle: ServerHandle, snapshot: MetricsSnapshot) -> None:
    """KV-cache capacity in tokens: vllm:cache_config_info's labels, else the boot log (synced by confirm_k)."""
    tokens, source = snapshot.kv_cache_tokens, "metrics"
    if tokens is None:
        tokens, source = kv_from_log(handle.record.log_path), "boot_log"
    handle.record = handle.record.model_copy(update={"kv_cache_tokens": tokens,
                                                     "kv_cache_source": None if tokens is None else source})


# After a connection fails, how long a dying server may take to be seen as exited.
EXIT_SEEN_S = 2.0


def _abort_reason(handle: ServerHandle, exc: CellsAborted) -> str:
    """Why cells stopped, in the user's terms: the server died (with its log), or what the client saw."""
    deadline = time.monotonic() + EXIT_SEEN_S
    while (code := handle.exited()) is None and time.monotonic() < deadline:
        time.sleep(0.05)
    if code is not None:
        dead = handle.dead()
        who = "server" if dead is None or dead.role == "server" else f"{dead.role} rank on {dead.host}"
        return f"{who} exited (code {code}) during the cell {exc.key.label}; log: {handle.log_tail(member=dead)}"
    return f"{exc}; server stopped"


def with_host_load(cells: list[CellResult], sampler: HostSampler, thresholds: Thresholds) -> list[CellResult]:
    """Each cell with what the host did besides the run over its window; a contaminated cell is rejected
    for it too, so that no round value is ever read from it (the round's launch runs again: experiment.py)."""
    out = []
    for cell in cells:
        load = sampler.load(cell.opened_at, cell.wall_s)
        busy = contamination(load, thresholds)
        update: dict[str, object] = {"host": load, "contaminated": busy}
        if busy and not cell.rejected:
            update |= {"rejected": True, "reject_reason": busy}
        out.append(cell.model_copy(update=update))
    return out


def run_arm(
    arm: ArmSpec,
    spec: ExperimentSpec,
    image: ImageRef,
    ctx: LaunchContext,
    facts: CheckpointFacts | None,
    namespace: str,
    round_no: int = 1,
    runner: CellRunner | None = None,
) -> ArmResult:
    """One launch of one arm. Every failure becomes a recorded outcome with its reason.

    When the server exits at boot and the arm lists fallback k values (a k-ladder), the
    next k is tried; the result says which k ran and why.
    """
    started = datetime.now(UTC)
    ladder = arm.ladder
    refused: list[str] = []
    for k in ladder:
        result = _launch_once(arm.with_k(k), spec, image, ctx, facts, namespace, round_no, runner or Isolated(),
                              started)
        result.k_requested = arm.k
        result.fallback_reason = "; ".join(refused) or None
        if result.status != "failed" or not result.boot_exit or k == ladder[-1]:
            return result
        refused.append(f"k={k} rejected at startup: {result.reason}")
    raise AssertionError("unreachable: the ladder always returns on its last rung")


def _launch_once(
    arm: ArmSpec, spec: ExperimentSpec, image: ImageRef, ctx: LaunchContext, facts: CheckpointFacts | None,
    namespace: str, round_no: int, runner: CellRunner, started: datetime,
) -> ArmResult:
    if facts is not None and facts.draft is not None:
        arm = arm.with_draft(facts.draft.path)  # `draft_model: early-exit` becomes the written draft's path
    method = arm.speculative.method if arm.speculative else None
    base = dict(name=arm.name, round=round_no, image=arm.image, k=arm.k, image_ref=image, method=method,
                started_at=started)
    refusals = arm_constraint_violations(facts, method, arm.k) if facts else []
    if arm.speculative is not None and arm.speculative.early_exit:  # resolve refuses it without draft_layers
        refusals.append(f"speculative.draft_model {EARLY_EXIT!r}: the model step wrote no early-exit draft; "
                        "fix: set model.draft_layers")
    if (held := gpu.precheck(arm.args)) is not None:
        refusals.append(f"precheck: {held}")
    if refusals:
        return ArmResult.model_validate({**base, "status": "refused", "reason": "; ".join(refusals),
                                         "ended_at": datetime.now(UTC)})
    handle: ServerHandle | None = None
    aborted: tuple[CellsAborted, str] | None = None
    try:
        with launcher_for(arm, image).start(arm, image, ctx) as handle:
            boot_s = wait_ready(handle, arm.boot_timeout_s)
            handle.record = handle.record.model_copy(update={"boot_s": boot_s})
            target = BenchTarget(handle.base_url, spec.served_name, namespace,
                                 eos_token_ids=tuple(facts.eos_token_ids) if facts else ())
            snapshot = asyncio.run(prepare(target, spec.workload, spec.sampling))
            confirm_k(arm, handle, snapshot)
            record_kv_capacity(handle, snapshot)
            probes = asyncio.run(probe(target, spec.workload, spec.design.probes, spec.design.probe_tokens))
            sampler = HostSampler(extra_roots=handle.local_roots,
                                  gpus=gpu_watch(platform_of(image.package).name, handle.record.env))
            with sampler, client_on(handle.record.client_cores):
                try:
                    cells = runner.measure(target, spec.workload, spec.sampling, Gates.of(spec))
                except CellsAborted as exc:
                    aborted = exc, _abort_reason(handle, exc)  # before the stop: a stopped server has exited too
        if handle.gpu_held:  # the measurement stands; the next launch's precheck would refuse this GPU
            log.warning("arm %s round %d: %s", arm.name, round_no, handle.gpu_held)
            base["reason"] = handle.gpu_held
        if aborted is not None:
            stopped, reason = aborted
            if stopped.measured:  # the cell itself came back: it is rejected for why its server went away first
                last = stopped.cells[-1]
                cells = [*stopped.cells[:-1], last.model_copy(update={
                    "rejected": True, "reject_reason": "; ".join(filter(None, [reason, last.reject_reason]))})]
            else:
                cells = [*stopped.cells, aborted_cell(stopped.key, spec.workload, reason)]
            cells = with_host_load(cells, sampler, spec.thresholds)
            return ArmResult.model_validate({**base, "status": "failed", "reason": reason, "cells": cells,
                                             "probes": probes, "launch": handle.record, "ended_at": datetime.now(UTC)})
        cells = with_host_load(cells, sampler, spec.thresholds)
        return ArmResult.model_validate({**base, "status": "ok", "launch": handle.record, "cells": cells,
                                         "probes": probes, "ended_at": datetime.now(UTC)})
    except (LaunchError, BenchError, httpx.HTTPError, OSError) as exc:
        reason = str(exc) or type(exc).__name__
        return ArmResult.model_validate({**base, "status": "failed", "reason": reason,
                                         "boot_exit": isinstance(exc, BootExit),
                                         "launch": handle.record if handle else None, "ended_at": datetime.now(UTC)})
