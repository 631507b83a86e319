"""A run's directory: `results.json` is written there first, atomically, after every finished
launch, so nothing measured is lost if the database is down; `specwatch ingest` loads it later.

`results.json` carries `schema_version`. A file written by an older specwatch is upgraded on
read; a key this version does not know is an error that names it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from specwatch.records import RESULTS_SCHEMA_VERSION, CheckpointFacts, RunResult
from specwatch.spec.design import RENAMED

RESULTS_FILE = "results.json"


class RunDirError(ValueError):
    """A results file that cannot be read; the message names the file, the key and the fix."""


def _v1_to_v2(doc: dict[str, Any]) -> dict[str, Any]:
    # v1 (no schema_version): cells had no load mode and quality rows no cell id; both have
    # defaults in v2 except the quality rows' cell, which v1 named by concurrency and class.
    for arm in doc.get("arms", []):
        for cell in arm.get("cells", []):
            cell.setdefault("load_mode", "closed")
    prompt_tokens = {(a.get("name"), c.get("concurrency"), c.get("prompt_class")): c.get("prompt_tokens")
                     for a in doc.get("arms", []) for c in a.get("cells", [])}
    for q in doc.get("quality", []):
        tokens = prompt_tokens.get((q.get("arm"), q.get("concurrency"), q.get("prompt_class")))
        if tokens is not None and q.get("cell") is None:
            q["cell"] = f"closed/c{q['concurrency']}/{q['prompt_class']}/p{tokens}"
    return {**doc, "schema_version": 2}


def _v2_to_v3(doc: dict[str, Any]) -> dict[str, Any]:
    # v3 added request ids, chunk-gap (ITL) histograms, per-request speculative figures, SLOs,
    # KV-cache and preemption figures. v2 never measured them: they stay None (not 0), which
    # their defaults already say, so the lift is the version alone.
    return {**doc, "schema_version": 3}


def _v3_to_v4(doc: dict[str, Any]) -> dict[str, Any]:
    # v4 added each request's output hash, and gave the arms of a round the same prompts (before, each
    # launch drew its own nonces). v3 hashed nothing: the hashes stay None, so the lift is the version alone.
    return {**doc, "schema_version": 4}


def _v4_to_v5(doc: dict[str, Any]) -> dict[str, Any]:
    # v5 calls one launch of each arm a round, as the spec and the reports do (issue 22): the launches' and
    # quality rows' `block` is `round`, and the recorded experiment's design.blocks and max_blocks are
    # rounds and max_rounds, so a resume or a report re-reads the spec the run ran with.
    for row in (*doc.get("arms", []), *doc.get("quality", [])):
        if isinstance(row, dict) and "block" in row:
            row["round"] = row.pop("block")
    design = doc.get("experiment", {}).get("design") if isinstance(doc.get("experiment"), dict) else None
    if isinstance(design, dict):
        for old, new in RENAMED.items():
            if old in design:
                design[new] = design.pop(old)
    return {**doc, "schema_version": 5}


# schema_version -> the function that lifts a document of that version by one.
UPGRADES: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {
    1: _v1_to_v2, 2: _v2_to_v3, 3: _v3_to_v4, 4: _v4_to_v5}


def upgrade(doc: dict[str, Any]) -> dict[str, Any]:
    """Lift an older results document to the current schema, one version at a time."""
    version = doc.get("schema_version", 1)
    if not isinstance(version, int) or version > RESULTS_SCHEMA_VERSION:
        raise RunDirError(f"schema_version {version!r} is newer than this specwatch reads "
                          f"({RESULTS_SCHEMA_VERSION}); upgrade specwatch")
    while version < RESULTS_SCHEMA_VERSION:
        doc = UPGRADES[version](doc)
        version = doc["schema_version"]
    return doc


def write_raw(result: RunResult, run_dir: Path) -> Path:
    """Atomically (re)write results.json: a crash mid-write never leaves a truncated file."""
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / RESULTS_FILE
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(result.model_dump_json(indent=1))
    tmp.replace(path)
    return path


def _where(loc: tuple[int | str, ...]) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc).lstrip(".") or "(file)"


def read_raw(run_dir: Path) -> RunResult:
    path = run_dir / RESULTS_FILE if run_dir.is_dir() else run_dir
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found; pass a run dir (SPECWATCH_HOME/runs/<run_id>) "
                                f"holding {RESULTS_FILE}")
    try:
        doc = json.loads(path.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise RunDirError(f"{path} is not JSON ({exc}); it is not a specwatch results file") from None
    if not isinstance(doc, dict):
        raise RunDirError(f"{path} holds a JSON {type(doc).__name__}, not a specwatch results object")
    try:
        return RunResult.model_validate(upgrade(doc))
    except ValidationError as exc:
        problems = []
        for e in exc.errors(include_url=False):
            if e["type"] == "extra_forbidden":
                problems.append(f"{_where(e['loc'])}: unknown key for schema_version {RESULTS_SCHEMA_VERSION}")
            else:
                problems.append(f"{_where(e['loc'])}: {e['msg']}")
        raise RunDirError(f"{path}: " + "; ".join(problems[:5]) + (f" (+{len(problems) - 5} more)"
                          if len(problems) > 5 else "") + "; was it written by a newer specwatch, or edited?") from None


def resume_conflicts(previous: RunResult, digests: dict[str, str | None], facts: CheckpointFacts | None) -> list[str]:
    """Why a run cannot be resumed: its launches so far measured other images or another checkpoint.

    `digests`: image name -> digest as built now; `facts`: the checkpoint as read now.
    """
    problems = []
    used = {a.image: a.image_ref.digest for a in previous.arms if a.image_ref and a.image_ref.digest}
    for image, was in used.items():
        now = digests.get(image)
        if now and was != now:
            problems.append(f"image {image} changed since the run's earlier launches "
                            f"(digest {was[:19]} then, {now[:19]} now)")
    before = previous.checkpoint
    if before and facts:
        for field in ("config_sha256", "index_sha256"):
            was, now = getattr(before, field), getattr(facts, field)
            if was != now:
                problems.append(f"the checkpoint changed: {field} {str(was)[:12]} then, {str(now)[:12]} now")
        # A packaged model's config is the same for every quantization of it: its GGUF names the weights.
        if before.source and facts.source and before.source.gguf_sha256 != facts.source.gguf_sha256:
            problems.append(f"the checkpoint changed: gguf_sha256 {before.source.gguf_sha256[:12]} then, "
                            f"{facts.source.gguf_sha256[:12]} now")
    return problems
