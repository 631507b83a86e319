"""Which A/B a bisect runs next, and what its A/Bs concluded: pure functions over the calls made so far.

Versions are indexes 0..n-1, oldest first. A step is a decisive A/B (analysis/sequential.py) of an older
version (the baseline) against a newer one, called `gain`, `regression`, `flat` (NO CHANGE),
`inconclusive`, or `failed` (an image did not build or boot). The search replays every call from the
start each time, so it holds no state a failed step could corrupt:

- The endpoints first (the first and last versions that build): unless they are decided apart there is
  nothing to find.
- An interval known to differ is split at its middle version m: (i, m) is measured; when it is flat,
  (m, j) holds the change (inferred, not measured); otherwise (m, j) is measured too, so that a second
  change (a gain and a later regression, or a change spread over versions) is seen, not assumed away.
  Each half that differs is split again; an inconclusive half is reported and narrowed no further.
- Adjacent versions that differ are a culprit candidate, checked by a fresh A/B (`verify`): a culprit
  is named only when that A/B decides the same change again.
- An image that fails is skipped (as asv does) and the search goes on over the others.

Error budget: each step's alpha is error / (1.5 * max_steps). One A/B makes one call, wrong in at most
alpha of runs (1.5 alpha for REVERT: the composite's alpha plus the cells' alarms at alpha/2,
analysis/sequential.py), at every look. A bisect runs at most max_steps A/Bs, so by the union bound
(Bonferroni) the chance that any of its calls is wrong, the wrong culprit included, is at most `error`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

Kind = Literal["endpoints", "step", "verify"]
Call = Literal["gain", "regression", "flat", "inconclusive", "failed"]
DIFFERS: tuple[Call, ...] = ("gain", "regression")
# analysis/sequential.py: a wrong REVERT is bounded by 1.5 alpha, PROMOTE and NO CHANGE by alpha
WORST_CALL_FACTOR = 1.5


@dataclass(frozen=True)
class Pair:
    """One A/B of the search: version `older` (the baseline) against version `newer`."""

    older: int
    newer: int
    kind: Kind


@dataclass(frozen=True)
class StepCall:
    pair: Pair
    call: Call
    failed: tuple[int, ...] = ()  # call "failed": the versions whose image did not build or boot


@dataclass(frozen=True)
class Culprit:
    """Adjacent versions (among those that built) found to differ, and what their verification said."""

    older: int
    newer: int
    direction: Call  # gain or regression, as the search found it
    verified: Call | None  # the fresh A/B's call; None: not run (budget, or its image failed)
    inferred: bool  # the search inferred the pair (its sibling was flat) rather than measured it

    @property
    def confirmed(self) -> bool:
        return self.verified == self.direction


@dataclass
class Survey:
    """The search replayed over the calls so far: the A/Bs still wanted, in order, and what was found."""

    pending: list[Pair] = field(default_factory=list)
    culprits: list[Culprit] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # inconclusive halves, failures, budget: what stopped narrowing
    skipped: list[int] = field(default_factory=list)
    endpoints: StepCall | None = None
    stopped: str | None = None  # the search cannot start or go on at all

    @property
    def confirmed(self) -> list[Culprit]:
        return [c for c in self.culprits if c.confirmed]


def default_max_steps(images: int) -> int:
    """The endpoints, both halves at each level down one path to adjacent versions, and one verification."""
    return 2 + 2 * math.ceil(math.log2(images - 1))


def step_alpha(error: float, max_steps: int) -> float:
    """The per-step alpha that bounds the whole bisect's chance of any wrong call by `error`."""
    return error / (WORST_CALL_FACTOR * max_steps)


def error_statement(error: float, max_steps: int) -> str:
    alpha = step_alpha(error, max_steps)
    return (f"each A/B decides at one-sided alpha {alpha:.4f} = {error:g} / (1.5 x {max_steps} A/Bs at most); a wrong "
            f"call is at most 1.5 alpha per A/B (analysis/sequential.py), so by the union bound over the {max_steps} "
            f"A/Bs the chance that the bisect makes any wrong call, naming a wrong culprit included, is at most "
            f"{error:.0%}")


def survey(names: Sequence[str], calls: Sequence[StepCall], max_steps: int) -> Survey:
    """Replay the search over `calls` (in the order made) for the versions `names`, oldest first."""
    return _Walk(names, calls, max_steps).run()


def next_pair(names: Sequence[str], calls: Sequence[StepCall], max_steps: int) -> Pair | None:
    """The next A/B to run, or None when the bisect is done (or its budget of max_steps A/Bs is spent)."""
    if len(calls) >= max_steps:
        return None
    pending = survey(names, calls, max_steps).pending
    return pending[0] if pending else None


def conclusion(s: Survey, names: Sequence[str]) -> str:
    """The bisect's one-line answer: one culprit, several changes, or why there is neither."""
    if s.stopped is not None:
        return s.stopped
    assert s.endpoints is not None  # a survey that did not stop has decided endpoints
    found = s.confirmed
    if len(found) > 1:
        return "several changes, no single culprit: " + ", ".join(culprit_line(c, names) for c in found)
    if len(found) == 1:
        (c,) = found
        if c.direction != s.endpoints.call:
            return (f"several changes: {culprit_line(c, names)}, while the endpoints say {s.endpoints.call}: the "
                    "other change is not located")
        return f"culprit: {culprit_line(c, names)}" + ("; other changes not ruled out (see the notes)" if s.notes
                                                       else "")
    if not s.culprits and not s.notes:
        return "no culprit: the search has not reached adjacent versions"
    return "no culprit confirmed" + (f": {s.notes[0]}" if s.notes else "")


def culprit_line(c: Culprit, names: Sequence[str]) -> str:
    # versions between them were skipped (they failed): the change is at the newer one or at one of those
    where = " or skipped ".join([names[c.newer], ", ".join(names[c.older + 1:c.newer])] if c.newer - c.older > 1
                                else [names[c.newer]])
    return f"{c.direction} at {where} (against {names[c.older]})"


class _Walk:
    def __init__(self, names: Sequence[str], calls: Sequence[StepCall], max_steps: int) -> None:
        self.names, self.n, self.max_steps = names, len(names), max_steps
        self.known = {c.pair: c for c in calls}  # a pair measured again (after a failure) counts as its last call
        self.skipped = sorted({i for c in calls if c.call == "failed" for i in c.failed})
        self.out = Survey(skipped=self.skipped)
        self.spent = len(calls) >= max_steps

    def run(self) -> Survey:
        usable = [i for i in range(self.n) if i not in self.skipped]
        if len(usable) < 2:
            self.out.stopped = "fewer than two images built and booted: nothing to compare"
            return self.out
        ends = Pair(usable[0], usable[-1], "endpoints")
        got = self._call(ends)
        if got is None:
            return self.out
        self.out.endpoints = got
        if got.call == "failed":  # an endpoint that fails is skipped in the replay, so only a lost boot gets here
            self.out.stopped = "the endpoints' A/B failed"
        elif got.call not in DIFFERS:
            self.out.stopped = f"the endpoints are not decided apart ({got.call}): there is no change to bisect"
        else:
            self._split(ends.older, ends.newer, got.call, inferred=False)
        return self.out

    def _call(self, pair: Pair) -> StepCall | None:
        """The pair's call, or None after queueing it (or noting that the budget is spent)."""
        got = self.known.get(pair)
        if got is None:
            if self.spent:
                self.out.notes.append(f"{self._span(pair)}: not measured, the budget of {self.max_steps} A/Bs is spent")
            else:
                self.out.pending.append(pair)
        return got

    def _split(self, i: int, j: int, direction: Call, inferred: bool) -> None:
        inner = [k for k in range(i + 1, j) if k not in self.skipped]
        if not inner:
            self._verify(i, j, direction, inferred)
            return
        m = inner[len(inner) // 2]
        left = self._call(Pair(i, m, "step"))
        if left is None or self._lost(left):
            return
        if left.call == "flat":  # the change is in (m, j): measuring it would only repeat the parent
            self._split(m, j, direction, inferred=True)
            return
        right = self._call(Pair(m, j, "step"))
        if right is None or self._lost(right):
            return
        for half in (left, right):
            if half.call in DIFFERS:
                self._split(half.pair.older, half.pair.newer, half.call, inferred=False)
            elif half.call == "inconclusive":
                self.out.notes.append(f"{self._span(half.pair)}: inconclusive, not narrowed further on this side")
        if left.call == "inconclusive" and right.call == "flat":
            self.out.notes.append(f"{self._span(Pair(i, j, 'step'))}: the change is not located: one half flat, the "
                                  "other inconclusive")

    def _lost(self, got: StepCall) -> bool:
        """A step that failed on an image the search still stands on (an interval's own end that booted
        before): that interval is narrowed no further."""
        if got.call != "failed":
            return False
        self.out.notes.append(f"{self._span(got.pair)}: the A/B failed (an image did not build or boot), not narrowed "
                              "further")
        return True

    def _verify(self, i: int, j: int, direction: Call, inferred: bool) -> None:
        got = self._call(Pair(i, j, "verify"))
        verified = None if got is None or got.call == "failed" else got.call
        self.out.culprits.append(Culprit(i, j, direction, verified, inferred))
        if got is not None and got.call == "failed":
            self.out.notes.append(f"{self._span(got.pair)}: the verification failed (an image did not build or boot)")
        elif verified is not None and verified != direction:
            self.out.notes.append(f"{self._span(Pair(i, j, 'verify'))}: found as {direction} "
                                  f"but the fresh A/B says {verified}: not named; a change spread over several "
                                  "versions, or smaller than the band at each, looks like this")

    def _span(self, pair: Pair) -> str:
        return f"{self.names[pair.older]} .. {self.names[pair.newer]}"
