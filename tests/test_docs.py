"""The documentation checked against the tree: the README's layout names only paths that exist,
every relative link in README.md and docs/ resolves (anchors included), and every measurement
rule the code cites is a rule of docs/measurement-rules.md.
"""

from __future__ import annotations

import re
from pathlib import Path

from specwatch_testing.server import REPO

README = REPO / "README.md"
RULES = REPO / "docs" / "measurement-rules.md"
# Where code and prose cite measurement rules.
CITING = ("specwatch", "tasks", "flows", "cli", "benchmarks", "tests", "testing", "sql", "docs")
CITING_FILES = ("README.md",)
SUFFIXES = {".py", ".md", ".sql", ".yaml", ".yml", ".sh", ".toml", ".txt"}

_FENCE = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)
_LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
_RULE_HEADING = re.compile(r"^## (\d+)\. \S", re.M)
# "measurement rule 7", "measurement rules 7, 8 and 10", "measurement rules 7-9"
_CITATION = re.compile(r"measurement rules?\s+(\d+(?:\s*(?:,|and|-|–)\s*\d+)*)", re.I)
_DOMAIN = re.compile(r"DOMAIN(?:\.md)?\s+rules?\s*\d+")


def _section(text: str, title: str) -> str:
    """The body of the `## title` section, up to the next heading of level 2 or above."""
    match = re.search(rf"^## {re.escape(title)}\s*$(.*?)(?=^#{{1,2}} |\Z)", text, re.S | re.M)
    assert match, f"README.md has no '## {title}' section"
    return match.group(1)


def layout_paths(readme: str) -> list[str]:
    """Every path the README's layout names: the first column of its table, and any other
    backquoted name with a slash in it."""
    section = _section(readme, "Layout")
    paths: list[str] = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")] if line.lstrip().startswith("|") else []
        if cells and not set(cells[0]) <= set("-: "):
            paths += re.findall(r"`([^`]+)`", cells[0])
        rest = " | ".join(cells[1:]) if cells else line
        paths += [p for p in re.findall(r"`([^`]+)`", rest) if "/" in p]
    return [p for p in dict.fromkeys(paths) if p != "path"]


def test_the_readme_layout_names_only_paths_that_exist() -> None:
    paths = layout_paths(README.read_text(encoding="utf-8"))
    assert len(paths) >= 15, f"the layout parser found only {paths}; is the Layout section a table of paths?"
    missing = [p for p in paths if not (REPO / p.rstrip("/")).exists()]
    assert not missing, f"README.md's layout names paths that do not exist: {missing}"


def test_the_layout_parser_reads_the_path_column_and_slashed_names() -> None:
    readme = (
        "# x\n## Layout\n`a/` is the engine; `results.json` is not a path here.\n\n"
        "| path | what |\n|---|---|\n| `b/c.py` | the `specwatch` command, `d/e/` |\n"
        "## Next\n| `f/` | after the section |\n"
    )
    assert layout_paths(readme) == ["a/", "b/c.py", "d/e/"]


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    text = re.sub(r"[`*_]|\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    text = _FENCE.sub("", path.read_text(encoding="utf-8"))
    return {_slug(m) for m in re.findall(r"^#{1,6} (.+?)\s*#*\s*$", text, re.M)}


def _doc_files() -> list[Path]:
    return [README, *sorted((REPO / "docs").glob("*.md"))]


def test_every_relative_link_in_the_docs_resolves() -> None:
    broken: list[str] = []
    for doc in _doc_files():
        text = _FENCE.sub("", doc.read_text(encoding="utf-8"))
        for target in _LINK.findall(text):
            if re.match(r"[a-z][a-z0-9+.-]*:", target, re.I):  # http:, https:, mailto:
                continue
            file_part, _, anchor = target.partition("#")
            dest = (doc.parent / file_part).resolve() if file_part else doc
            where = f"{doc.relative_to(REPO)}: ({target})"
            if not dest.exists():
                broken.append(f"{where} -> no such file")
            elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
                broken.append(f"{where} -> no heading #{anchor} in {dest.relative_to(REPO)}")
    assert not broken, "broken links:\n" + "\n".join(broken)


def _sources() -> list[Path]:
    files = [REPO / f for f in CITING_FILES]
    for top in CITING:
        files += [p for p in (REPO / top).rglob("*") if p.is_file() and p.suffix in SUFFIXES
                  and "__pycache__" not in p.parts and p != Path(__file__).resolve()]
    return sorted(files)


def _numbers(spec: str) -> set[int]:
    """"7" -> {7}; "7, 8 and 10" -> {7, 8, 10}; "7-9" -> {7, 8, 9}."""
    out: set[int] = set()
    for part in filter(None, (p.strip() for p in re.split(r"\s*(?:,|\band\b)\s*", spec))):
        span = re.fullmatch(r"(\d+)\s*[-–]\s*(\d+)", part)
        out |= set(range(int(span[1]), int(span[2]) + 1)) if span else {int(part)}
    return out


def cited_rules() -> dict[int, list[str]]:
    """Rule number -> where it is cited (file:line)."""
    cited: dict[int, list[str]] = {}
    for path in _sources():
        for lineno, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            for spec in _CITATION.findall(line):
                for n in _numbers(spec):
                    cited.setdefault(n, []).append(f"{path.relative_to(REPO)}:{lineno}")
    return cited


def test_the_rules_keep_their_numbering() -> None:
    numbers = [int(n) for n in _RULE_HEADING.findall(RULES.read_text(encoding="utf-8"))]
    assert numbers == list(range(1, len(numbers) + 1)) and len(numbers) >= 12, numbers


def test_every_cited_measurement_rule_is_in_measurement_rules_md() -> None:
    rules = {int(n) for n in _RULE_HEADING.findall(RULES.read_text(encoding="utf-8"))}
    cited = cited_rules()
    assert cited, "no 'measurement rule N' citation found; did the citation form change?"
    missing = {n: where for n, where in cited.items() if n not in rules}
    assert not missing, f"cited rules with no '## N.' heading in docs/measurement-rules.md: {missing}"


def test_no_citation_of_the_old_domain_rules_is_left() -> None:
    left = [f"{path.relative_to(REPO)}:{lineno}: {line.strip()}"
            for path in _sources()
            for lineno, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1)
            if _DOMAIN.search(line)]
    assert not left, ("cite the project's own rules as 'measurement rule N' (docs/measurement-rules.md), "
                      "not DOMAIN.md, which is not in the tree:\n" + "\n".join(left))


def test_the_citation_parser_reads_lists_and_ranges() -> None:
    assert _numbers("7") == {7}
    assert _numbers("7, 8 and 10") == {7, 8, 10}
    assert _numbers("7-9") == {7, 8, 9}
    assert _slug("## 11. All ranks; workers first"[3:]) == "11-all-ranks-workers-first"
    assert _slug("Open-loop load: request rates, arrivals, ramp-up") == "open-loop-load-request-rates-arrivals-ramp-up"
