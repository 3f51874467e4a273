"""No circle of imports among the modules of core, lazy ones (inside a function) included:
only imports under ``if TYPE_CHECKING`` (types, never run) and package ``__init__`` re-exports
are left out. A circle means one concept split over two modules, held together by a deferred
import (``core.scheduling.config`` checked names against ``ordering``, which imported the
config back)."""

from __future__ import annotations

import ast
from pathlib import Path

CORE = Path(__file__).resolve().parents[2] / "core"


def _module(path: Path) -> str:
    return ".".join(path.relative_to(CORE.parent).with_suffix("").parts)


def _imports(tree: ast.AST) -> list[str]:
    out: list[str] = []
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            continue
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out += [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        else:
            out += _imports(node)
    return out


def _graph() -> dict[str, set[str]]:
    modules = {_module(p): p for p in CORE.rglob("*.py") if p.name != "__init__.py"}
    return {
        name: {m for m in _imports(ast.parse(path.read_text())) if m in modules} - {name}
        for name, path in modules.items()
    }


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(n: str) -> list[str] | None:
        state[n] = 1
        stack.append(n)
        for m in sorted(graph[n]):
            if state.get(m) == 1:
                return [*stack[stack.index(m) :], m]
            if m not in state and (found := visit(m)):
                return found
        stack.pop()
        state[n] = 2
        return None

    for n in sorted(graph):
        if n not in state and (found := visit(n)):
            return found
    return None


def test_core_modules_import_in_one_direction() -> None:
    graph = _graph()
    assert len(graph) > 30 and graph["core.scheduling.scheduler"]  # the walk found core
    assert _cycle(graph) is None, " -> ".join(_cycle(graph) or [])


def test_the_check_finds_a_circle() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None
