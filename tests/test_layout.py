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


def test_nothing_imports_the_cli() -> None:
    importers = [str(p.relative_to(REPO)) for p in _python_files("specwatch", "tasks", "flows")
                 if re.search(r"^\s*(from cli\b|import cli\b)", p.read_text(), re.MULTILINE)]
    assert importers == []
