"""Fuzz `specwatch validate` with bad experiment files: schema-aware mutations and raw bytes.

Every case goes through the CLI (typer's CliRunner, in this process) and must keep the contract:
exit 0 (valid) or 1 (invalid), no traceback, one bounded line per problem
(specwatch_testing.specfuzz.check). CI runs the same strategies a few hundred cases at a time
(tests/test_spec_fuzz.py); this is the benchmark-sized run.

    .venv/bin/python benchmarks/fuzz_specs.py [--cases 10000] [--seed N]

Prints the cases run, how many were valid, the distinct problem lines, the tracebacks (must be
0) and the time; exit 1 if any case broke the contract, with the first few inputs saved.
"""

from __future__ import annotations

import argparse
import collections
import random
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from hypothesis import HealthCheck, given, seed, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from specwatch_testing import specfuzz  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=10_000, help="total cases, half structured, half raw bytes")
    parser.add_argument("--seed", type=int, default=None, help="hypothesis seed (default: random, printed)")
    parser.add_argument("--keep", type=Path, default=Path(tempfile.gettempdir()) / "specwatch-fuzz-failures",
                        help="where the first failing inputs are written")
    a = parser.parse_args()
    run_seed = a.seed if a.seed is not None else random.randrange(2**32)
    workdir = Path(tempfile.mkdtemp(prefix="specwatch-fuzz-"))
    counts: collections.Counter[str] = collections.Counter()
    lines: collections.Counter[str] = collections.Counter()
    failures: list[tuple[str, bytes, str]] = []
    slowest = (0.0, b"")

    def one(kind: str, data: bytes) -> None:
        nonlocal slowest
        started = time.perf_counter()
        verdict = specfuzz.check(data, workdir)
        took = time.perf_counter() - started
        slowest = max(slowest, (took, data))
        counts[kind] += 1
        counts["valid" if verdict.valid else "invalid"] += 1
        lines.update(verdict.problems)
        if verdict.failure is not None:
            counts["failures"] += 1
            counts["tracebacks"] += "Traceback" in verdict.failure
            failures.append((kind, data, verdict.failure))

    common = dict(deadline=None, database=None, suppress_health_check=list(HealthCheck))
    for kind, strategy, n in (("structured", specfuzz.structured, a.cases // 2),
                              ("raw", specfuzz.raw_bytes, a.cases - a.cases // 2)):
        run = seed(run_seed)(settings(max_examples=n, **common)(given(st.just(kind), strategy)(one)))
        started = time.perf_counter()
        run()
        counts[f"{kind}_s"] = round(time.perf_counter() - started)
    total = counts["structured"] + counts["raw"]
    elapsed = counts["structured_s"] + counts["raw_s"]
    print(f"seed {run_seed}")
    print(f"cases {total} (structured {counts['structured']}, raw bytes {counts['raw']}); valid {counts['valid']}, "
          f"invalid {counts['invalid']}")
    print(f"distinct problem lines {len(lines)}; problem lines printed {sum(lines.values())}")
    print(f"tracebacks {counts['tracebacks']}; contract failures {counts['failures']}")
    print(f"time {elapsed} s ({counts['structured_s']} s structured, {counts['raw_s']} s raw; "
          f"{1e3 * elapsed / max(total, 1):.1f} ms per case; slowest case {slowest[0] * 1e3:.0f} ms)")
    print("most frequent problem kinds:")
    kinds = collections.Counter(line.split(": ", 1)[-1][:70] for line in lines.elements())
    for text, n in kinds.most_common(8):
        print(f"  {n:6}  {text}")
    if failures:
        a.keep.mkdir(parents=True, exist_ok=True)
        for i, (kind, data, why) in enumerate(failures[:5]):
            (a.keep / f"{i}-{kind}.yaml").write_bytes(data)
            print(f"\nFAILED ({kind}, input in {a.keep / f'{i}-{kind}.yaml'}):\n{why[-2000:]}")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
