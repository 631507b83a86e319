"""Running a launch's benchmark: readiness and warm-up, the greedy probes, and every cell.

`measure_cells` runs the cells from the calling process; a cell that needs more than one
client process fans out over worker processes (bench/fanout.py), started once per call. A
`CellRunner` decides where the calling process is: `InProcess` (the standalone `specwatch
bench`, tests) or `Isolated` (a fresh process, what the flow uses).
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
from collections.abc import Callable
from dataclasses import dataclass, replace
from multiprocessing.connection import Connection
from typing import Protocol

import httpx

from specwatch.bench.cell import run_cell
from specwatch.bench.client import BenchError, BenchTarget, Client
from specwatch.bench.corpus import sources
from specwatch.bench.fanout import FanOut, cell_streams, die_with_parent, workers_for
from specwatch.bench.gates import Gates
from specwatch.bench.metrics import MetricsSnapshot
from specwatch.bench.prompts import PromptRequest
from specwatch.bench.transports import run_on_loop
from specwatch.records import CellKey, CellResult
from specwatch.spec import SamplingSpec, WorkloadSpec

log = logging.getLogger("specwatch.bench")

CellCallback = Callable[[CellResult], None]


class CellsAborted(BenchError):
    """The cells stopped before the last one: the server went away or hung during cell `key`.

    Carries the cells finished before it, so that they are kept; plain arguments, so that it
    crosses a process boundary (Isolated) intact.
    """

    def __init__(self, cells: list[CellResult], key: CellKey, reason: str, measured: bool = False) -> None:
        """`measured`: the last of `cells` is cell `key` itself (rejected by its gates), else it never finished."""
        super().__init__(cells, key, reason, measured)
        self.cells, self.key, self.reason, self.measured = cells, key, reason, measured

    def __str__(self) -> str:
        return f"cell {self.key.label}: {self.reason}"

    def __repr__(self) -> str:  # what a log shows: the reason, not every cell it carries
        return f"CellsAborted({self})"


async def _unreachable(client: Client, cell: CellResult) -> str | None:
    """A cell whose requests could not connect, against a server that no longer answers /health: it went
    away, and every later cell would only count the same failures."""
    if not cell.failures_by_kind.get("connection"):
        return None
    try:
        (await client.http.get("/health", timeout=UNREACHABLE_PROBE_S)).raise_for_status()
    except httpx.HTTPError as exc:
        return f"the server stopped answering ({type(exc).__name__} on /health)"
    return None


UNREACHABLE_PROBE_S = 5.0


def _timed_out(cell: CellResult) -> str | None:
    """A cell whose requests hit the client's read timeout: the server hangs, and every later cell
    would wait out the same timeout; the arm stops here (its server is stopped with it)."""
    first = next((r for r in cell.requests if r.status == "timeout"), None)
    return None if first is None else f"{cell.failures_by_kind.get('timeout', 0)} request(s) hit the {first.error}"
PROBE_NAMESPACE = "specwatch-probe"  # fixed: every arm answers the very same probe prompts


def cell_keys(workload: WorkloadSpec) -> list[CellKey]:
    """The cells a workload asks for, in the order they run: closed-loop levels, then request rates
    (a sweep: one cell per rate), then the ramp, each over every prompt source (class or corpus)."""
    levels: list[dict[str, object]] = [{"concurrency": c} for c in workload.concurrency]
    levels += [{"load": "rate", "rate": r} for r in workload.request_rates]
    if workload.ramp_up:
        levels.append({"load": "rate", "rate": workload.ramp_up.end_rps, "ramp_from": workload.ramp_up.start_rps})
    return [CellKey.model_validate({**level, "prompt_class": s.name,
                                    "prompt_tokens": workload.prompt_tokens if s.sized else 0})
            for level in levels for s in sources(workload)]


async def warm_up(client: Client) -> None:
    """Discarded requests after every (re)start: the first ones hit JIT/autotune (measurement rule 5)."""
    wl = client.workload
    srcs = sources(wl)
    for i in range(wl.warmup_requests):
        req = PromptRequest(wl.seed, -1 - i, f"{client.target.namespace}:warmup", wl.prompt_tokens, wl.nonce)
        prompt = await srcs[i % len(srcs)].prompt(req, client.count)
        sample, _ = await client.stream(i, prompt, prompt.max_tokens or wl.max_tokens)
        if sample.status != "ok":
            raise BenchError(f"warm-up request failed: {sample.error}")


async def prepare(target: BenchTarget, workload: WorkloadSpec, sampling: SamplingSpec) -> MetricsSnapshot:
    """Check the endpoint serves the model, warm it up (discarded), return its counters after warm-up.

    Once speculation has run, the counters' position labels tell the server's real k.
    """
    async with Client(target, workload, sampling) as client:
        await client.check_ready()
        await warm_up(client)
        return await client.metrics()


async def probe(target: BenchTarget, workload: WorkloadSpec, count: int, max_tokens: int) -> list[list[int]]:
    """Greedy single-stream answers to fixed prompts, as token ids, for the correctness gate.

    Speculative decoding must not change greedy output, so these are compared across arms.
    """
    greedy = SamplingSpec(temperature=0.0, top_p=1.0, top_k=-1, seed=0)
    outputs = []
    srcs = sources(workload)
    async with Client(target, workload, greedy) as client:
        for i in range(count):
            req = PromptRequest(0, i, PROBE_NAMESPACE, workload.prompt_tokens)
            prompt = await srcs[i % len(srcs)].prompt(req, client.count)
            sample, output = await client.stream(i, prompt, max_tokens)
            if sample.status != "ok":
                raise BenchError(f"probe {i} failed: {sample.error}")
            outputs.append(output if isinstance(output, list) else await client.token_ids(output))
    return outputs


async def measure_cells(
    target: BenchTarget, workload: WorkloadSpec, sampling: SamplingSpec, gates: Gates,
    on_cell: CellCallback | None = None,
) -> list[CellResult]:
    """Every cell of the workload, in order, in this process."""
    keys = cell_keys(workload)
    most = max(workers_for(workload, cell_streams(workload, k)) for k in keys)
    # worker processes only when some cell needs more than one; then once for every cell
    with FanOut(most, workload.client_transport) if most > 1 else contextlib.nullcontext() as fan:
        # An open loop may have every request of its cell in flight at once: a connection cap would queue
        # them inside the client, where the send-time lateness cannot see it.
        streams = max(cell_streams(workload, k) for k in keys)
        async with Client(target, workload, sampling, streams=streams) as client:
            cells: list[CellResult] = []
            for key in keys:
                try:
                    cell = await run_cell(client, key, gates, fan)
                except (httpx.HTTPError, BenchError, OSError) as exc:  # the server went away mid-cell
                    raise CellsAborted(cells, key, f"{type(exc).__name__}: {exc}"[:300]) from None
                mal = cell.window.mean_acceptance_length
                log.info(
                    "cell %s: decode %.1f tok/s, mean acceptance length %s%s",
                    key.label, cell.decode_tok_s_median or 0.0, "n/a" if mal is None else f"{mal:.2f}",
                    f", REJECTED: {cell.reject_reason}" if cell.rejected else "",
                )
                cells.append(cell)
                if on_cell:
                    on_cell(cell)
                if (gone := _timed_out(cell) or await _unreachable(client, cell)) is not None:
                    raise CellsAborted(cells, key, gone, measured=True)
            return cells


class CellRunner(Protocol):
    def measure(self, target: BenchTarget, workload: WorkloadSpec, sampling: SamplingSpec,
                gates: Gates) -> list[CellResult]: ...


class StreamingRunner(CellRunner, Protocol):
    """A runner that can hand each cell to a callback as it finishes (what `Isolated` runs)."""

    def streaming(self, on_cell: CellCallback) -> CellRunner: ...

    def pending(self, workload: WorkloadSpec, done: list[CellResult]) -> CellKey:
        """The cell it runs after `done`: what a deadline abort names and stores."""
        ...


@dataclass(frozen=True)
class InProcess:
    on_cell: CellCallback | None = None

    def measure(self, target: BenchTarget, workload: WorkloadSpec, sampling: SamplingSpec,
                gates: Gates) -> list[CellResult]:
        return run_on_loop(workload.client_transport, measure_cells(target, workload, sampling, gates, self.on_cell))

    def streaming(self, on_cell: CellCallback) -> InProcess:
        return replace(self, on_cell=on_cell)

    def pending(self, workload: WorkloadSpec, done: list[CellResult]) -> CellKey:
        keys = cell_keys(workload)
        return keys[min(len(done), len(keys) - 1)]


def _measure_in_child(conn: Connection, runner: StreamingRunner, target: BenchTarget, workload: WorkloadSpec,
                      sampling: SamplingSpec, gates: Gates) -> None:
    """The child's side: each cell goes back to the parent as it finishes, then ("done", None) or the error."""
    die_with_parent()
    # A spawned process starts with default logging: keep per-cell progress visible on stderr.
    logging.basicConfig(format="%(asctime)s | %(levelname)-7s | %(name)s - %(message)s")
    logging.getLogger("specwatch").setLevel(logging.INFO)
    try:
        runner.streaming(lambda cell: conn.send(("cell", cell))).measure(target, workload, sampling, gates)
    except BenchError as exc:
        conn.send(("error", exc))
    except Exception as exc:  # anything else still reaches the parent as one line, not a dead pipe
        conn.send(("error", BenchError(f"client process: {type(exc).__name__}: {exc}"[:300])))
    else:
        conn.send(("done", None))
    finally:
        conn.close()


@dataclass(frozen=True)
class Isolated:
    """`inner`'s measurement (default: the workload's cells) in a fresh process of its own.

    Chunk arrival times are taken on the client's event loop; inside a flow process,
    Prefect's log and event threads hold the GIL often enough to stall that loop, so
    chunks pile up and are stamped together (bursts seen in whole-flow runs, not in a
    bare client against the same server).

    Each cell comes back as it finishes (`on_cell` sees it then), so a cell that dies keeps the
    ones before it. On any interrupt (Ctrl-C, SIGTERM, cancellation) the child is killed at once
    rather than waited for: a pool's shutdown would wait out the running cell, and the server
    stop behind it (the SIGINT timeouts of tests/test_interrupt.py on a loaded host).
    """

    on_cell: CellCallback | None = None
    inner: StreamingRunner = InProcess()  # what the child runs (a sweep's depths: bench/sweep.py)

    def measure(self, target: BenchTarget, workload: WorkloadSpec, sampling: SamplingSpec,
                gates: Gates) -> list[CellResult]:
        ctx = multiprocessing.get_context("spawn")
        ours, theirs = ctx.Pipe(duplex=False)
        child = ctx.Process(target=_measure_in_child, args=(theirs, self.inner, target, workload, sampling, gates),
                            name="specwatch-cells")
        cells: list[CellResult] = []
        try:
            child.start()
            theirs.close()
            while True:
                if not ours.poll(workload.cell_deadline_s):  # one deadline per cell, from the one before
                    raise CellsAborted(cells, self.inner.pending(workload, cells),
                                       f"not finished within {workload.cell_deadline_s:g}s (cell_deadline_s)")
                try:
                    kind, payload = ours.recv()
                except EOFError:
                    child.join(5)
                    raise BenchError(f"the client process died (exit {child.exitcode})") from None
                if kind == "cell":
                    cells.append(payload)
                    if self.on_cell:
                        self.on_cell(payload)
                elif kind == "error":
                    raise payload
                else:
                    return cells
        finally:
            if child.is_alive():
                child.kill()  # its fan-out workers follow it (die_with_parent)
            child.join(5)
            ours.close()
