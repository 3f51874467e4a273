"""SchedulerHandle names each call to the SeerScheduler deployment once: every one of them must
be a method of the deployment with the same parameters and answer, so a renamed or re-shaped
scheduler method fails here rather than as an AttributeError on a live request."""

from __future__ import annotations

import inspect

import pytest

from app.serve.ingress.scheduler_handle import SchedulerHandle
from app.serve.scheduler.deployment import SeerScheduler

DEPLOYMENT = SeerScheduler.func_or_class  # the class under Serve's decorator
CALLS = [
    name
    for name, fn in inspect.getmembers(SchedulerHandle, inspect.isfunction)
    if not name.startswith("_")
]


def test_the_handle_covers_the_calls_the_ingress_makes() -> None:
    assert {"submit", "status", "cancel", "wait", "stream_groups", "health"} <= set(CALLS)


@pytest.mark.parametrize("name", CALLS)
def test_each_call_is_a_deployment_method_with_the_same_signature(name: str) -> None:
    ours = inspect.signature(getattr(SchedulerHandle, name))
    theirs = inspect.signature(getattr(DEPLOYMENT, name))  # through @refusing's __wrapped__
    assert list(ours.parameters) == list(theirs.parameters), name
    for p, q in zip(ours.parameters.values(), theirs.parameters.values(), strict=True):
        assert (p.annotation, p.default) == (q.annotation, q.default), (name, p.name)
    assert ours.return_annotation == theirs.return_annotation, name
