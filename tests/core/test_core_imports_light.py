"""core must import without torch, vllm, ray (heavy backends are lazy)."""

import subprocess
import sys

CODE = """
import importlib, pkgutil, sys
import core
for m in pkgutil.walk_packages(core.__path__, "core."):
    importlib.import_module(m.name)
heavy = sorted(m for m in ("torch", "vllm", "ray", "sqlalchemy", "fastapi", "transformers")
               if m in sys.modules)
print(",".join(heavy))
"""


def test_core_imports_without_heavy_backends() -> None:
    out = subprocess.run(
        [sys.executable, "-c", CODE], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.strip() == "", f"core imported heavy modules: {out.stdout}"
