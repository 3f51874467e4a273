"""The top-level packages import in one direction: ``lab`` -> ``dashboard`` -> ``app`` ->
``core``, and the product (``core``, ``app``, ``dashboard``) never imports the laboratory.

Every import counts, lazy ones inside functions and ``TYPE_CHECKING`` blocks included: a lazy
import of ``lab`` from the product would still make the service depend on an experiment.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: package -> the top-level packages of this project it may import (itself included)
ALLOWED = {
    "core": {"core"},
    "app": {"app", "core"},
    "dashboard": {"dashboard", "app", "core"},
    "lab": {"lab", "dashboard", "app", "core"},
}
PROJECT = {*ALLOWED, "examples", "migrations", "tests"}


def _imported(tree: ast.AST) -> set[str]:
    """The top-level package of every absolute import in ``tree``."""
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module.split(".")[0])
    return out


def violations(root: Path = ROOT) -> list[str]:
    """``path: imports PKG`` for every import across the allowed directions under ``root``."""
    bad = []
    for package, allowed in ALLOWED.items():
        for path in sorted((root / package).rglob("*.py")):
            for top in sorted(_imported(ast.parse(path.read_text())) & PROJECT - allowed):
                bad.append(f"{path.relative_to(root)}: imports {top}")
    return bad


def test_packages_import_in_one_direction() -> None:
    assert len(list((ROOT / "lab").rglob("*.py"))) > 10  # the walk found the laboratory
    assert violations() == []


def test_the_check_finds_a_lazy_import_of_the_lab(tmp_path: Path) -> None:
    for package in ALLOWED:
        (tmp_path / package).mkdir()
    (tmp_path / "app" / "ok.py").write_text("import core.sim\nfrom app.config import X\n")
    (tmp_path / "app" / "bad.py").write_text("def f():\n    from lab.bench import service\n")
    (tmp_path / "core" / "up.py").write_text("import app.config\n")
    (tmp_path / "lab" / "fine.py").write_text("import app, core, dashboard\n")
    assert violations(tmp_path) == ["core/up.py: imports app", "app/bad.py: imports lab"]


#: the largest a module of the product or the lab may be (CONTRIBUTING.md)
MAX_MODULE_LINES = 600


def oversized(root: Path = ROOT, limit: int = MAX_MODULE_LINES) -> list[str]:
    """``path: N lines`` for every module of the packages over ``limit`` lines."""
    out = []
    for package in ALLOWED:
        for path in sorted((root / package).rglob("*.py")):
            n = len(path.read_text().splitlines())
            if n > limit:
                out.append(f"{path.relative_to(root)}: {n} lines")
    return out


def test_no_module_is_over_the_size_limit(tmp_path: Path) -> None:
    assert oversized() == []
    for package in ALLOWED:
        (tmp_path / package).mkdir()
    (tmp_path / "app" / "big.py").write_text("x = 1\n" * 601)
    (tmp_path / "core" / "fine.py").write_text("x = 1\n" * 600)
    assert oversized(tmp_path) == ["app/big.py: 601 lines"]
