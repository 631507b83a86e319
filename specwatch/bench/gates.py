"""Gates: the checks that make a measured cell trustworthy, or reject it with its reason."""

from __future__ import annotations

import math
from dataclasses import dataclass

from specwatch.bench.selfcheck import saturation
from specwatch.records import ARRIVAL_GAP_S, MAX_COALESCED_SHARE, MIN_GROUP_SHARE, CellResult
from specwatch.spec import ExperimentSpec, Thresholds

_DEFAULT = Thresholds()


@dataclass(frozen=True)
class Gates:
    max_prefix_cache_hit_rate: float = 0.01
    repetition_flag_ratio: float = 0.5
    client_loop_lag_ms: float = _DEFAULT.client_loop_lag_ms
    client_cpu_share: float = _DEFAULT.client_cpu_share
    client_send_lateness_ms: float = _DEFAULT.client_send_lateness_ms
    max_failed_share: float = _DEFAULT.max_failed_share
    min_running_share: float = _DEFAULT.min_running_share

    @classmethod
    def of(cls, spec: ExperimentSpec) -> Gates:
        t = spec.thresholds
        return cls(t.max_prefix_cache_hit_rate, spec.workload.repetition_flag_ratio, t.client_loop_lag_ms,
                   t.client_cpu_share, t.client_send_lateness_ms, t.max_failed_share, t.min_running_share)

    def running_needed(self, concurrency: int) -> int:
        """The least peak of the running gauge that counts as concurrency reached (Thresholds says why)."""
        return math.ceil(self.min_running_share * concurrency - 1e-9)


def gate(cell: CellResult, gates: Gates) -> CellResult:
    """Reject cells whose numbers cannot be trusted; flag the suspicious ones. Pure, so testable."""
    reasons, flags = [], []
    if cell.requests_failed:
        first = next(r for r in cell.requests if r.status != "ok")
        kinds = ", ".join(f"{kind}: {n}" for kind, n in cell.failures_by_kind.items())
        failed = f"{cell.requests_failed} of {len(cell.requests)} requests failed ({kinds}; first: {first.error})"
        if cell.requests_failed > gates.max_failed_share * len(cell.requests):
            reasons.append(failed)
        else:
            flags.append(f"{failed}, within max_failed_share {gates.max_failed_share:g}")
    client = cell.client and saturation(cell.client, gates.client_loop_lag_ms, gates.client_cpu_share,
                                        gates.client_send_lateness_ms)
    if client:
        reasons.append(f"client saturated ({', '.join(client)}): the client, not the server, set these timings; "
                       "fix: more client_workers, more cores for the client, or a lighter client_transport")
    bursts = sum(r.coalesced for r in cell.requests)
    # A saturated client coalesces reads itself: then the reason above is the cause, not the server.
    if not client and bursts > MAX_COALESCED_SHARE * len(cell.requests):
        reasons.append(
            f"{bursts} of {len(cell.requests)} streams arrived in one burst (median gap between chunks "
            f"in fewer reads {ARRIVAL_GAP_S * 1e3:g} ms apart than {MIN_GROUP_SHARE:.0%} of their chunks; more than "
            f"{MAX_COALESCED_SHARE:.0%} allowed): the server buffered "
            "them, so per-stream decode rate is not measurable"
        )
    if (cell.concurrency and cell.max_running_observed is not None
            and cell.max_running_observed < (needed := gates.running_needed(cell.concurrency))):
        reasons.append(
            f"concurrency {cell.concurrency} never reached (max running observed {cell.max_running_observed}): "
            f"below {needed}, {gates.min_running_share:.0%} of it (thresholds.min_running_share)"
        )
    hit = cell.window.prefix_cache_hit_rate
    if cell.prefix_cache_gate and hit is not None and hit >= gates.max_prefix_cache_hit_rate:
        reasons.append(f"prefix-cache hit rate {hit:.1%} >= {gates.max_prefix_cache_hit_rate:.0%}: prompts were cached")
    if cell.counters_error or all(v is None for v in cell.window.model_dump().values()):
        flags.append(f"no counters in this cell's window: {cell.counters_error or 'the server exposes none'}; "
                     "acceptance figures are missing, not zero")
    rep = cell.repetition_ratio_median
    if rep is not None and rep > gates.repetition_flag_ratio:
        flags.append(f"acceptance may be inflated by repetition (median repetition ratio {rep:.2f})")
    return cell.model_copy(
        update={"rejected": bool(reasons), "reject_reason": "; ".join(reasons) or None, "flags": flags}
    )
