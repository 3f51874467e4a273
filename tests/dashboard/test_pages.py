"""Every page's logic through Streamlit's ``AppTest`` (``run_every`` fragments run once here):
a filled store, an empty one, the service up (a fake one with the real operator rules) and
down; the Tuning form sending a change with the operator token."""

from __future__ import annotations

import sys
from typing import Any

import pytest
from streamlit.testing.v1 import AppTest

from tests.dashboard.conftest import SMALL, FakeService

PAGES = ("now", "speculation", "history", "tuning")


def _page(name: str) -> None:  # the script AppTest runs (its source, with ``name`` as arg)
    import importlib

    importlib.import_module(f"dashboard.screens.{name}").render()


def run(monkeypatch: pytest.MonkeyPatch, page: str, db: str, service: str) -> AppTest:
    monkeypatch.setattr(
        sys, "argv", ["app.py", "--database-url", db, "--service-url", service, "--refresh-s", "1"]
    )
    at = AppTest.from_function(_page, args=(page,), default_timeout=60)
    return at.run()


def texts(elements: Any) -> str:
    return "\n".join(str(e.value) for e in elements)


def _clean(at: AppTest) -> None:
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, texts(at.error)


def test_now_shows_the_running_job(monkeypatch, filled_url: str, fake_service: FakeService) -> None:
    at = run(monkeypatch, "now", filled_url, fake_service.url)
    _clean(at)
    assert "job002" in texts(at.subheader) and "running" in texts(at.subheader)
    [bar] = at.get("progress")
    total = SMALL.groups * SMALL.group_size
    assert f"/ {total} requests finished" in bar.proto.text
    done = int(bar.proto.text.split(" / ")[0])
    assert 0 < done < total and bar.proto.value == round(100 * done / total)
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["tail (last 10%)"] == "-"  # not every request is done yet
    assert int(metrics["output tokens"].replace(",", "")) > 0
    assert len(at.get("plotly_chart")) == 4  # finished, groups, load, timeline
    assert "Service " + fake_service.url in texts(at.caption) and "**ok**" in texts(at.caption)
    assert at.dataframe[0].value["replica"].tolist() == ["replica-0"]
    assert at.dataframe[0].value["state"].tolist() == ["healthy"]


def test_speculation_page(monkeypatch, filled_url: str, down_url: str) -> None:
    at = run(monkeypatch, "speculation", filled_url, down_url)
    _clean(at)
    metrics = {m.label: m.value for m in at.metric}
    assert 1.0 < float(metrics["acceptance length"]) < 2.0
    assert metrics["groups that drafted"].endswith(f"/ {SMALL.groups}")
    assert len(at.get("plotly_chart")) == 2


def test_history_page(monkeypatch, filled_url: str, down_url: str) -> None:
    at = run(monkeypatch, "history", filled_url, down_url)
    _clean(at)
    jobs, accuracy = at.dataframe[0].value, at.dataframe[1].value
    assert jobs["job"].tolist() == ["job002", "job001", "job000"]
    assert jobs["state"].tolist() == ["running", "done", "done"]
    assert float(jobs["tail share"][1]) > 0
    # prompts recur: job001 and job002 have a prior from the jobs before them, job000 none
    assert accuracy["groups with a prior"].tolist()[1:] == [SMALL.groups, 0]
    assert len(at.get("plotly_chart")) == 3


@pytest.mark.parametrize("page", PAGES)
def test_empty_store_and_no_service_are_friendly(
    monkeypatch, page: str, empty_url: str, down_url: str
) -> None:
    at = run(monkeypatch, page, empty_url, down_url)
    _clean(at)
    shown = texts(at.info) + texts(at.warning)
    if page == "tuning":
        assert "unreachable" in texts(at.warning) and "Nothing recorded yet" in texts(at.info)
    else:
        assert "No rollout recorded yet" in shown or "Nothing recorded yet" in shown


def test_tuning_sends_a_change_with_the_token(
    monkeypatch, filled_url: str, fake_service: FakeService
) -> None:
    monkeypatch.delenv("SEER_OPERATOR_TOKEN", raising=False)
    monkeypatch.setenv("USER", "ann")  # the form's default operator name
    at = run(monkeypatch, "tuning", filled_url, fake_service.url)
    _clean(at)
    audit = at.dataframe[-1].value
    assert audit["changes"].tolist() == ["max_draft: 8 → 4"] and audit["who"].tolist() == ["bench"]
    [max_draft] = [n for n in at.number_input if n.label == "max_draft"]
    max_draft.set_value(3)
    [token] = [t for t in at.text_input if t.label == "operator token"]
    [reason] = [t for t in at.text_input if t.label.startswith("reason")]
    token.input("wrong")
    reason.input("shorter drafts")
    at.button[0].click().run()
    assert "403" in texts(at.warning) and fake_service.puts == []
    [token] = [t for t in at.text_input if t.label == "operator token"]
    token.input("s3cret")
    at.button[0].click().run()
    _clean(at)
    assert fake_service.puts == [({"max_draft": 3}, "ann", "shorter drafts")]
    assert "Applied as version 1: max_draft = 3" in texts(at.success)
    assert fake_service.state.settings["max_draft"] == 3
    assert "Running: version 1" in texts(at.subheader)


def test_the_operator_token_is_never_pre_filled_from_the_dashboard_s_environment(
    monkeypatch, filled_url: str, fake_service: FakeService
) -> None:
    """The form used to pre-fill SEER_OPERATOR_TOKEN from the dashboard's own environment:
    anyone who reached the dashboard's port could apply changes."""
    monkeypatch.setenv("SEER_OPERATOR_TOKEN", "s3cret")
    at = run(monkeypatch, "tuning", filled_url, fake_service.url)
    [token] = [t for t in at.text_input if t.label == "operator token"]
    assert token.value == ""
    [max_draft] = [n for n in at.number_input if n.label == "max_draft"]
    max_draft.set_value(3)
    at.button[0].click().run()
    assert fake_service.puts == [] and "operator token is needed" in texts(at.warning)


def test_tuning_without_changes_or_token_sends_nothing(
    monkeypatch, filled_url: str, fake_service: FakeService
) -> None:
    monkeypatch.delenv("SEER_OPERATOR_TOKEN", raising=False)
    at = run(monkeypatch, "tuning", filled_url, fake_service.url)
    at.button[0].click().run()
    assert "Nothing changed." in texts(at.info)
    [flag] = [c for c in at.checkbox if c.label == "enabled"]
    flag.uncheck()
    at.button[0].click().run()
    assert "operator token is needed" in texts(at.warning) and fake_service.puts == []


def test_app_navigation_opens_on_now(monkeypatch, empty_url: str, down_url: str) -> None:
    monkeypatch.setattr(
        sys, "argv", ["app.py", "--database-url", empty_url, "--service-url", down_url]
    )
    at = AppTest.from_file("../../dashboard/streamlit_app.py", default_timeout=60).run()
    _clean(at)
    assert texts(at.title) == "Now"


def test_a_bad_argument_is_a_message(monkeypatch, empty_url: str) -> None:
    at = run(monkeypatch, "now", empty_url, "localhost:8000")
    assert not at.exception
    assert "must start with http" in texts(at.error)


def test_an_error_answer_is_told_in_words() -> None:
    from app.client import SeerHTTPError
    from dashboard.ui import refusal

    field = {"loc": ["body", "settings", "max_draft"], "msg": "must be int", "type": "value_error"}
    bad = SeerHTTPError("PUT", "u", 422, [field], None)
    assert refusal(bad) == "HTTP 422: max_draft: must be int"
    assert refusal(SeerHTTPError("PUT", "u", 403, "wrong operator token", None)) == (
        "HTTP 403: wrong operator token"
    )
