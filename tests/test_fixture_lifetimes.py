"""The session fixtures that hold processes (``tests/conftest.py``, ``CLOSE_AFTER_LAST_USE``) end
after the module of their last user, each once; a fixture a test gets by
``request.getfixturevalue`` counts when its requester says so (``requests_dynamically``)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CONFTEST = """
import os
import pytest
from tests.conftest import pytest_collection_finish, pytest_runtest_teardown, requests_dynamically

def log(what):
    with open(os.environ["EVENTS"], "a") as f:
        f.write(what + "\\n")

@pytest.fixture(scope="session")
def local_service():
    log("local_service up")
    yield "service"
    log("local_service closed")

@pytest.fixture(scope="session")
def vllm_engine():
    log("vllm_engine up")
    yield "engine"
    log("vllm_engine closed")

@pytest.fixture(scope="module")
def app(local_service):
    yield local_service
    log("app down")  # a module fixture on the session one: torn down first

@pytest.fixture(params=["vllm", "fake"])
@requests_dynamically("vllm_engine")
def engine(request):
    return request.getfixturevalue("vllm_engine") if request.param == "vllm" else "fake"
"""

MODULES = {
    "test_a.py": "def test_one(app): pass\ndef test_two(): pass\n",
    "test_b.py": "def test_engine(engine): pass\n",
    "test_c.py": (
        "from conftest import log\ndef test_later(): log('test_c ran')\n"
        "def test_again_later(): log('test_c ran again')\n"
    ),
}


def _events(tmp_path: Path, *args: str) -> list[str]:
    (tmp_path / "conftest.py").write_text(textwrap.dedent(CONFTEST))
    for name, text in MODULES.items():
        (tmp_path / name).write_text(text)
    events = tmp_path / "events.txt"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args, str(tmp_path)],
        cwd=tmp_path,
        env={"PYTHONPATH": f"{ROOT}:{tmp_path}", "EVENTS": str(events), "PATH": "/usr/bin"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return events.read_text().splitlines()


def test_each_ends_after_its_last_user_s_module_once(tmp_path: Path) -> None:
    assert _events(tmp_path) == [
        "local_service up",
        "app down",
        "local_service closed",  # after test_a.py, whose last test does not use it
        "vllm_engine up",
        "vllm_engine closed",  # got by getfixturevalue, in test_b.py only
        "test_c ran",
        "test_c ran again",
    ]


def test_a_deselected_user_does_not_keep_it(tmp_path: Path) -> None:
    assert _events(tmp_path, "-k", "test_engine or test_c or test_two") == [
        "vllm_engine up",
        "vllm_engine closed",
        "test_c ran",
        "test_c ran again",
    ]
