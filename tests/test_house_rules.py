"""House rules that keep the code walkable: no function longer than a screen (80 lines, docstring
included) in the four packages, and no upward imports (graph/ and models/ know nothing of the trainer)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("graph", "models", "ggtrain", "env_bridge")
MAX_LINES = 80


def _modules(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


def test_no_function_is_longer_than_80_lines():
    long = [
        f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1} lines)"
        for package in PACKAGES
        for path in _modules(package)
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and (node.end_lineno or node.lineno) - node.lineno + 1 > MAX_LINES
    ]
    assert not long, long


def _imported_packages(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_dependencies_point_down():
    forbidden = {"graph": {"models", "ggtrain", "env_bridge"}, "models": {"ggtrain", "env_bridge", "graph"}}
    forbidden["env_bridge"] = {"ggtrain"}
    upward = [
        f"{path.relative_to(ROOT)} imports {sorted(_imported_packages(path) & banned)}"
        for package, banned in forbidden.items()
        for path in _modules(package)
        if _imported_packages(path) & banned
    ]
    assert not upward, upward
