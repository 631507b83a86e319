"""How often an arm's outputs equal the baseline's for the same prompt, per cell.

The arms of a round send the same request ids and prompts (engine/namespaces.py), so a request of
an arm and the baseline's request with the same id in the same round and cell answered the same
prompt; equal output hashes mean equal outputs. Arms that share a server send prompts of their own,
so they have no such pairs. sql/queries/output-match.sql counts the same from the database.

A mismatch is not a correctness failure: batched kernels, another image or a CPU build diverge under
greedy decoding too. Only the greedy probes (single stream) judge correctness.
"""

from __future__ import annotations

from dataclasses import dataclass

from specwatch.records import ArmResult, RunResult


@dataclass(frozen=True)
class OutputMatch:
    arm: str
    cell: str  # CellKey.id
    paired: int  # requests of the arm with a same-prompt request of the baseline, both hashed
    matched: int  # of those, with the baseline's output hash


def _hashes(arm: ArmResult) -> dict[tuple[str, str], str]:
    """(cell, request id) -> output hash of the launch's finished requests."""
    return {(c.cell, r.request_id): r.output_sha256 for c in arm.cells for r in c.requests
            if r.request_id is not None and r.output_sha256 is not None}


def output_matches(result: RunResult, baseline: str) -> list[OutputMatch]:
    """Per non-baseline arm and cell, pooled over the rounds both ran: paired and matching requests."""
    base = {a.round: _hashes(a) for a in result.arms if a.name == baseline}
    counts: dict[tuple[str, str], list[int]] = {}
    for arm in result.arms:
        if arm.name == baseline or arm.round not in base:
            continue
        for (cell, request_id), digest in _hashes(arm).items():
            other = base[arm.round].get((cell, request_id))
            if other is not None:
                count = counts.setdefault((arm.name, cell), [0, 0])
                count[0] += 1
                count[1] += other == digest
    return [OutputMatch(arm, cell, paired, matched) for (arm, cell), (paired, matched) in counts.items()]
