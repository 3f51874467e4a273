"""The run's time per test module (``tests/conftest.py``, printed at the end of ``./test.sh``):
setup, call and teardown of every test counted to its module, slowest first."""

from __future__ import annotations

from dataclasses import dataclass

from tests.conftest import module_times


@dataclass
class _Report:
    nodeid: str
    duration: float


def test_every_phase_counts_to_its_module_slowest_first() -> None:
    reports = [
        _Report("tests/a.py::t1", 1.0),  # setup
        _Report("tests/a.py::t1", 2.0),  # call
        _Report("tests/a.py::t2[x]", 0.5),
        _Report("tests/b.py::t", 4.0),
    ]
    assert module_times(reports) == [("tests/b.py", 4.0, 1), ("tests/a.py", 3.5, 2)]
