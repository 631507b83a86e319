"""The layout's rules, checked on the code itself: the engine imports no Prefect, every Prefect
task lives in tasks/ and follows the naming rule, and the load generator's package stays light.
"""

from __future__ import annotations

import ast
import json
import pkgutil
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import specwatch
from specwatch_testing.server import REPO

# Imports each engine module in turn, in a fresh interpreter, and names the first that brought in
# a module whose import is expensive or belongs at the edge.
_PROBE = """
import importlib, json, sys
heavy = ("prefect", "great_expectations", "cli", "tasks", "flows")
culprits = {}
for name in sys.argv[1:]:
    importlib.import_module(name)
    for mod in heavy:
        if mod in sys.modules and mod not in culprits:
            culprits[mod] = name
print(json.dumps(culprits))
"""


def _engine_modules() -> list[str]:
    return sorted(m.name for m in pkgutil.walk_packages(specwatch.__path__, "specwatch.")
                  # scripts an image's python runs, never imported by the pipeline
                  if m.name not in ("specwatch.engine.modelgen", "specwatch.engine.vllm_cli"))


def test_no_engine_module_imports_prefect_or_the_edge() -> None:
    modules = _engine_modules()
    assert len(modules) > 30
    out = subprocess.run([sys.executable, "-c", _PROBE, *modules], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == {}


def test_the_load_generator_imports_no_scipy_pandas_or_duckdb() -> None:
    bench = [m for m in _engine_modules() if m.startswith("specwatch.bench")]
    probe = _PROBE.replace('("prefect", "great_expectations", "cli", "tasks", "flows")',
                           '("scipy", "pandas", "duckdb", "ruptures", "matplotlib", "numpy")')
    out = subprocess.run([sys.executable, "-c", probe, *bench], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == {}


def _python_files(*folders: str) -> list[Path]:
    return [p for folder in folders for p in sorted((REPO / folder).rglob("*.py"))]


def _decorators(tree: ast.AST, name: str) -> list[tuple[ast.FunctionDef, ast.Call | ast.Name]]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef):
            for dec in node.decorator_list:
                target = dec.func if isinstance(dec, ast.Call) else dec
                if isinstance(target, ast.Name) and target.id == name:
                    found.append((node, dec))
    return found


def test_prefect_is_imported_only_in_tasks_and_flows() -> None:
    importers = {str(p.relative_to(REPO)) for p in _python_files("specwatch", "cli", "tasks", "flows")
                 if re.search(r"^\s*(from prefect\b|import prefect\b)", p.read_text(), re.MULTILINE)}
    assert importers, "the flows must import prefect somewhere"
    assert {p.split("/")[0] for p in importers} <= {"tasks", "flows"}, importers


def test_every_task_is_in_tasks_and_named_after_its_function() -> None:
    tasks = {}
    for path in _python_files("specwatch", "cli", "tasks", "flows"):
        for fn, dec in _decorators(ast.parse(path.read_text()), "task"):
            assert path.parts[-2] == "tasks", f"@task {fn.name} in {path}: every task lives in tasks/"
            assert isinstance(dec, ast.Call), f"@task {fn.name}: give it name= (the naming rule)"
            name = next(k.value.value for k in dec.keywords if k.arg == "name" and isinstance(k.value, ast.Constant))
            assert name == fn.name and re.fullmatch(r"[a-z]+_[a-z_]+", name), (path, fn.name, name)
            tasks[name] = path
    assert {"build_image", "prepare_checkpoint", "launch_arm", "measure_cells", "ingest_run", "check_quality",
            "check_history", "write_report"} <= tasks.keys()


def test_every_flow_is_in_flows() -> None:
    flows = [(path, fn.name) for path in _python_files("specwatch", "cli", "tasks", "flows")
             for fn, _ in _decorators(ast.parse(path.read_text()), "flow")]
    assert {name for _, name in flows} >= {"ab", "regression"}
    assert all(path.parts[-2] == "flows" for path, _ in flows), flows


def test_no_flow_or_task_module_shadows_the_standard_library() -> None:
    # Prefect puts a deployment's flow directory on sys.path (and a spawned child inherits it): a
    # flows/bisect.py there shadowed the stdlib `bisect` that `random` imports, and every client
    # process of a deployed run died on import.
    clashes = [str(path.relative_to(REPO)) for folder in ("flows", "tasks") for path in (REPO / folder).glob("*.py")
               if path.stem in sys.stdlib_module_names]
    assert clashes == []


def test_nothing_imports_the_cli() -> None:
    importers = [str(p.relative_to(REPO)) for p in _python_files("specwatch", "tasks", "flows")
                 if re.search(r"^\s*(from cli\b|import cli\b)", p.read_text(), re.MULTILINE)]
    assert importers == []


# The import graph: one node per module of these folders (root, folder), an edge per import of one
# of them. An import inside a function is an edge: it runs as surely as one at the top, and moving an
# import into a function must not hide a circle. Only `if TYPE_CHECKING:` imports are no edge (they
# never run). A package's __init__ is reached only where it is named: Python runs it before a child,
# but a package that re-exports its children is not in a circle with them.
_GRAPH_ROOTS = ((REPO, "specwatch"), (REPO, "tasks"), (REPO, "flows"), (REPO, "cli"),
                (REPO / "testing", "specwatch_testing"))


def _module_name(root: Path, path: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _runtime_imports(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement that can run: anywhere (functions too), except under `if TYPE_CHECKING:`."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.orelse:
                yield from _runtime_imports(ast.Module(body=[child], type_ignores=[]))
            continue
        yield from _runtime_imports(node)


def _import_graph() -> dict[str, set[str]]:
    files = {_module_name(root, path): path for root, folder in _GRAPH_ROOTS
             for path in sorted((root / folder).rglob("*.py"))}
    graph: dict[str, set[str]] = {name: set() for name in files}
    for name, path in files.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in _runtime_imports(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package if node.level else ""
                base = ".".join(p for p in (base, node.module or "") if p)
                # `from pkg import name`: the module pkg.name where name is one, else pkg itself
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in files else base for a in node.names]
            for target in targets:
                while target and target not in files:  # `import a.b.c` of a name inside a module
                    target = target.rpartition(".")[0]
                if target and target != name:
                    graph[name].add(target)
    return graph


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Each circle (a strongly connected set of more than one module), as one path around it (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    sets: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            members = []
            while not members or members[-1] != node:
                members.append(stack.pop())
            if len(members) > 1:
                sets.append(sorted(members))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return [_path_around(graph, members) for members in sets]


def _path_around(graph: dict[str, set[str]], members: list[str]) -> list[str]:
    """The shortest way from the first member back to itself, through members only."""
    start, inside = members[0], set(members)
    paths = {nxt: [start, nxt] for nxt in sorted(graph[start] & inside)}
    queue = list(paths)
    while start not in paths:
        node = queue.pop(0)
        for nxt in sorted(graph[node] & inside):
            if nxt not in paths:
                paths[nxt] = [*paths[node], nxt]
                queue.append(nxt)
    return paths[start]


def test_no_import_circles() -> None:
    graph = _import_graph()
    assert "specwatch.spec" in graph["specwatch.resolve"] and len(graph) > 100
    circles = _circles(graph)
    assert not circles, "import circles:\n" + "\n".join(" -> ".join(c) for c in circles)


def test_the_circle_check_sees_imports_inside_functions_and_skips_type_checking() -> None:
    tree = ast.parse("import a\nif TYPE_CHECKING:\n    import b\nelse:\n    import c\n"
                     "def f():\n    import d\n    if x:\n        from e import g\n")
    assert [ast.unparse(n) for n in _runtime_imports(tree)] == ["import a", "import c", "import d", "from e import g"]
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"]]


def test_the_spec_imports_nothing_above_it() -> None:
    # parsing is a leaf: the spec's package reaches only itself and pure helpers, never the engine
    graph = _import_graph()
    reached, todo = set(), ["specwatch.spec"]
    while todo:
        node = todo.pop()
        if node not in reached:
            reached.add(node)
            todo += graph[node]
    assert {m for m in reached if not m.startswith("specwatch.spec")} <= {
        "specwatch.design", "specwatch.redact"}, sorted(reached)
