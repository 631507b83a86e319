"""The launch order of the rounds, counterbalanced against drift, and the launch pairs it implies.

A round is one launch of each arm. It is the unit of replication, not a request (measurement rule 7:
identical boots of the same config swing 45-65 tok/s in one cell), so comparisons pair one value per
round across arms.
"""

from __future__ import annotations

from collections.abc import Sequence


def _thue_morse(i: int) -> int:
    return bin(i).count("1") & 1


def _williams_rows(m: int) -> list[list[int]]:
    # Standard Williams construction: first row 0, 1, m-1, 2, m-2, ...; row r adds r (mod m).
    first = [0]
    lo, hi = 1, m - 1
    while len(first) < m:
        first.append(lo)
        lo += 1
        if len(first) < m:
            first.append(hi)
            hi -= 1
    return [[(x + r) % m for x in first] for r in range(m)]


def _mirror_pairs(m: int) -> list[tuple[list[int], list[int]]]:
    """The Williams design as (row, reversed row) pairs.

    Even m: the reverse of row r is row r + m/2, so the m-row square is m/2 such pairs.
    Odd m: Williams needs the square plus its mirror image (2m rows), i.e. m pairs.
    A row followed by its mirror gives every arm the same summed position, which is what
    cancels linear drift every two rounds.
    """
    rows = _williams_rows(m)
    if m % 2 == 0:
        return [(rows[r], rows[r][::-1]) for r in range(m // 2)]
    return [(row, row[::-1]) for row in rows]


def round_order(arms: Sequence[str], rounds: int) -> list[tuple[str, int]]:
    """Launch sequence of (arm, round number, from 1), counterbalanced against drift.

    Each round launches every arm once. Rounds come in mirror pairs (a row of a Williams design, then
    that row reversed), and which member of the pair goes first follows the Thue-Morse sequence over
    pair index.

    Guarantees (tested):
    1. Round i holds the i-th launch of every arm (paired launches are at most len(arms)-1 launches
       apart; adjacent for two arms).
    2. After every even number of rounds, every arm has the same mean launch position, so a
       linear drift (thermal, page cache, a neighbour's job ramping up) cancels exactly; with an
       odd number of rounds the imbalance is at most one round.
    3. Over each full Williams cycle (m rounds for an even number of arms m, 2m for odd m) every
       arm takes each within-round position equally often, and within rounds every arm directly
       precedes every other arm equally often (carry-over balance). Transitions across round
       boundaries are not balanced.
    4. Two arms: the sequence is the Thue-Morse sequence A B B A B A A B ..., so the first 2^(d+1)
       launches also cancel polynomial drift up to degree d (Prouhet-Tarry-Escott).
    5. round_order(arms, n) is a prefix of round_order(arms, n + 1), so adaptive stopping can
       extend a run one round at a time and keep every guarantee above.
    """
    if not arms:
        raise ValueError("round_order needs at least one arm")
    if len(set(arms)) != len(arms):
        raise ValueError(f"arm names must be unique: {list(arms)}")
    if rounds < 0:
        raise ValueError("rounds must be >= 0")
    pairs = _mirror_pairs(len(arms))
    rows: list[list[int]] = []
    k = 0
    while len(rows) < rounds:
        fwd, rev = pairs[k % len(pairs)]
        rows += [fwd, rev] if _thue_morse(k) == 0 else [rev, fwd]
        k += 1
    return [(arms[a], r + 1) for r, row in enumerate(rows[:rounds]) for a in row]


def pair_rounds(order: Sequence[tuple[str, int]], baseline: str, candidate: str) -> list[tuple[int, int]]:
    """(baseline round, candidate round) pairs: the i-th launch of one with the i-th of the other.

    In a round_order sequence those two launches sit in the same round (adjacent for two arms),
    so the pair shares whatever slow drift the host had at the time; the paired difference
    removes it. A trailing launch without a partner is left out.
    """
    if baseline == candidate:
        raise ValueError("baseline and candidate must be different arms")
    base = [n for arm, n in order if arm == baseline]
    cand = [n for arm, n in order if arm == candidate]
    return list(zip(base, cand, strict=False))  # a trailing launch without a partner drops out
