"""Reading an experiment file: bounded YAML, relative paths, and one readable line per problem."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import ValidationError

from specwatch.spec.base import expand
from specwatch.spec.bisect import BisectSpec
from specwatch.spec.design import RENAMED
from specwatch.spec.experiment import ExperimentSpec


class SpecError(Exception):
    """An experiment file that cannot run; `problems` holds one line per problem."""

    def __init__(self, source: str, problems: list[str]) -> None:
        self.source = source
        self.problems = problems
        super().__init__(f"{source}: " + "; ".join(problems))


_FIXES = {
    "extra_forbidden": "remove it (check the spelling against docs/experiment-file.md)",
    "missing": "add it",
    "greater_than": "use a larger value",
    "greater_than_equal": "use a larger value",
    "less_than": "use a smaller value",
    "less_than_equal": "use a smaller value",
    "literal_error": "use one of the listed values",
    "int_parsing": "write a whole number",
    "int_type": "write a whole number",
    "float_parsing": "write a number",
    "bool_parsing": "write true or false",
    "string_type": "write a string",
    "list_type": "write a list",
    "dict_type": "write a mapping",
    "model_type": "write a mapping",
    "too_short": "add at least one entry",
    "string_pattern_mismatch": "use letters, digits, '.', '_' or '-'",
    "finite_number": "write a finite number (not .inf or .nan)",
}


def _location(loc: tuple[Any, ...], raw: Any) -> str:
    """`arms[1](k5).speculative.k`: list indexes plus the arm/image name when there is one."""
    out = ""
    node = raw
    for part in loc:
        if isinstance(part, int) and isinstance(node, list):
            out += f"[{part}]"
            node = node[part] if part < len(node) else None
            if isinstance(node, dict) and isinstance(node.get("name"), str):
                out += f"({_clip(node['name'], 40)})"
        else:
            # a key as written when it is a plain word; else quoted, so no key can break the line
            name = part if isinstance(part, str) and part.isidentifier() else repr(part)
            out += f".{_clip(name, 60)}" if out else _clip(name, 60)
            node = node.get(part) if isinstance(node, dict) else None
    return out or "(file)"


def _clip(text: str, limit: int) -> str:
    """One short line: a value pasted from a 4 MB file must not become a 4 MB error line."""
    text = " ".join(text.splitlines())
    return text if len(text) <= limit else f"{text[:limit - 20]}...{text[-15:]} ({len(text):,} chars)"


# A problem line stays readable: long enough for every message the validators write, fix included.
_LINE = 400


def problem_line(loc: tuple[Any, ...], raw: Any, message: str) -> str:
    """One problem at `loc` of the document `raw`, as a validator's own message is shown."""
    return _clip(f"{_location(loc, raw)}: {message}", _LINE)


# (section, old key) -> the key's new name: an old key is its own problem line, naming the new key and its value.
_RENAMED = {("design", old): new for old, new in RENAMED.items()}


def _renamed(loc: tuple[Any, ...], value: Any) -> str | None:
    new = _RENAMED.get(loc) if len(loc) == 2 else None
    if new is None:
        return None
    written = " ".join(yaml.safe_dump(value, default_flow_style=True).removesuffix("...\n").split())
    return f"renamed to {loc[0]}.{new}; fix: write `{new}: {_clip(written, 60)}`"


def format_validation_error(err: ValidationError, raw: Any) -> list[str]:
    lines = []
    for e in err.errors(include_url=False):
        where = _location(e["loc"], raw)
        if e["type"] == "extra_forbidden" and (renamed := _renamed(e["loc"], e["input"])):
            lines.append(_clip(f"{where}: {renamed}", _LINE))
            continue
        msg = e["msg"].removeprefix("Value error, ")
        if e["type"] == "value_error":
            lines.append(problem_line(e["loc"], raw, msg))
            continue
        shown = "" if e["type"] == "missing" else f" (got {_clip(repr(e['input']), 80)})"
        fix = _FIXES.get(e["type"])
        lines.append(_clip(f"{where}: {msg}{shown}" + (f"; fix: {fix}" if fix else ""), _LINE))
    return lines


# An experiment file is a page of settings (the examples are ~2 KB); prompts live in a corpus file.
MAX_SPEC_BYTES = 1 << 20
# Values after YAML anchors and aliases are expanded: a few lines of aliases can stand for billions.
MAX_SPEC_VALUES = 100_000


def _expanded_size(node: Any) -> int:
    """How many values validation will visit once aliases are expanded; ValueError for a cycle."""
    sizes: dict[int, int] = {}
    open_: set[int] = set()

    def size(n: Any) -> int:
        if not isinstance(n, dict | list):
            return 1
        if id(n) in sizes:
            return sizes[id(n)]
        if id(n) in open_:
            raise ValueError("a YAML alias refers to a node that contains it (a recursive structure); "
                             "fix: write the value out instead of the alias")
        open_.add(id(n))
        children = [*n.keys(), *n.values()] if isinstance(n, dict) else n
        total = 1
        for child in children:
            total += size(child)
            if total > MAX_SPEC_VALUES:
                break
        open_.discard(id(n))
        sizes[id(n)] = total
        return total

    return size(node)


def _read_yaml(path: Path) -> Any:
    """The file's YAML document, or SpecError with one line saying why it cannot be read."""
    def fail(problem: str) -> SpecError:
        return SpecError(str(path), [problem])

    try:
        size = path.stat().st_size
        if path.is_dir():
            raise fail("is a directory; pass the path of an experiment YAML file")
        if size > MAX_SPEC_BYTES:
            raise fail(f"is {size:,} bytes, over specwatch's cap of {MAX_SPEC_BYTES:,} for an experiment file; "
                       "fix: put prompts in a corpus file (workload.corpus) and keep settings here")
        data = path.read_bytes()
    except FileNotFoundError:
        raise fail("file not found; pass the path of an experiment YAML file") from None
    except OSError as exc:
        raise fail(f"cannot be read ({exc.strerror or exc}); fix: check the path and its permissions") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise fail(f"is not UTF-8 text (byte {data[exc.start]:#04x} at offset {exc.start}); is it a binary "
                   "file? fix: pass the experiment YAML file") from None
    too_deep = fail("nests lists or mappings too deep; fix: an experiment file is a few levels deep (see examples/)")
    try:
        # libyaml when PyYAML has it: ~7x faster, and it refuses deep nesting itself instead of recursing
        raw = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError as exc:
        raise fail(_clip(f"not valid YAML: {exc}", _LINE)) from None
    except RecursionError:
        raise too_deep from None
    try:
        values = _expanded_size(raw)
    except ValueError as exc:
        raise fail(str(exc)) from None
    except RecursionError:
        raise too_deep from None
    if values > MAX_SPEC_VALUES:
        raise fail(f"expands to over {MAX_SPEC_VALUES:,} values (YAML anchors and aliases), over specwatch's cap; "
                   "fix: write the settings out without nested aliases")
    return raw


def parse_spec(path: Path) -> ExperimentSpec:
    """Read and parse an experiment file; relative paths (model, corpus, a variance file) resolve against the
    file's folder.

    Parsing only: the names it holds are checked against the registries by specwatch.resolve.
    """
    return _parse(path, ExperimentSpec, "name:, model:, images:, arms:, ...")


def parse_bisect(path: Path) -> BisectSpec:
    """Read and parse a bisect file (`specwatch bisect`), as an experiment file is read."""
    return _parse(path, BisectSpec, "name:, model:, images:, arm:, cells:, ...")


def is_bisect_file(path: Path) -> bool:
    """A bisect file has one `arm:` that every image runs where an experiment file has `arms:`; a file that
    cannot be read is left to the experiment parser, which says why in one line."""
    try:
        raw = _read_yaml(path)
    except SpecError:
        return False
    return isinstance(raw, dict) and "arm" in raw and "arms" not in raw


_File = TypeVar("_File", ExperimentSpec, BisectSpec)


def _parse(path: Path, kind: type[_File], sections: str) -> _File:
    raw = _read_yaml(path)
    if not isinstance(raw, dict):
        raise SpecError(str(path), [f"the file must be a YAML mapping ({sections})"])
    for section, key in (("model", "path"), ("workload", "corpus"), ("design", "variance_from")):
        node = raw.get(section)
        # a path that cannot be one (a NUL byte, ~nosuchuser) is left for validation to name; variance_from
        # is a path only when it names an exported file (a run id is left as it is)
        if (isinstance(node, dict) and isinstance(node.get(key), str) and "\0" not in node[key]
                and (key != "variance_from" or node[key].endswith(".json"))):
            with contextlib.suppress(ValueError):
                p = expand(Path(node[key]))
                node[key] = str(p if p.is_absolute() else (path.parent / p).resolve())
    try:
        return kind.model_validate(raw)
    except ValidationError as err:
        raise SpecError(str(path), format_validation_error(err, raw)) from None


def parse_stored(experiment: dict[str, Any]) -> ExperimentSpec:
    """The spec a past run recorded, parsed without re-checking what may have changed on disk since."""
    return ExperimentSpec.model_validate(experiment, context={"stored": True})
