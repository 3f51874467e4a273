"""End to end in headless Chromium: a real Serve app (fake engine replicas, the history store on
a temp SQLite file), ``streamlit run dashboard/streamlit_app.py`` as a subprocess, and Debian's
chromium driven by playwright (``executable_path``; never ``playwright install``). While a
rollout runs, the Now page's progress advances without a reload; a change made in the Tuning
panel reaches the service (``GET /v1/speculation``) and its audit log.

Chromium comes from ``./test.sh`` (``ensure_chromium``); without it this test is skipped with
the reason, except under CI (``CI=true``), where it fails."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.serve.local import LocalService
from tests.conftest import free_port

pytestmark = [pytest.mark.serve, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = os.environ.get("SEER_CHROMIUM", "/usr/bin/chromium")
TOKEN = "dash-t0ken"
LOAD_WINDOW_S = 4  # the replica-load chart: a job's last 4 s


def _browser_missing() -> str | None:
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "Python playwright is not installed (dev extra)"
    if not os.access(CHROMIUM, os.X_OK):
        return f"{CHROMIUM} missing (./test.sh installs Debian's chromium with apt-get)"
    return None


@pytest.fixture(scope="module")
def browser_ok() -> None:
    why = _browser_missing()
    if why is None:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"browser test cannot run under CI: {why}")
    pytest.skip(why)


@pytest.fixture(scope="module")
def service(
    browser_ok: None, local_service: LocalService, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, str]]:
    db = f"sqlite:///{tmp_path_factory.mktemp('dash-e2e') / 'seer.db'}"
    app: dict[str, Any] = {
        "num_replicas": 2,
        "replica_num_cpus": 0.25,
        "chunk_tokens": 8,
        "policy": "seer",
        "health_period_s": 0.5,
        "operator_token": TOKEN,
        "store": {"enabled": True, "database_url": db},
        # ~100 tokens per response at 40 ms per token: a rollout of a few tens of seconds
        "engine": {"backend": "fake", "max_model_len": 1024, "fake_step_s": 0.04},
    }
    yield local_service.deploy(app), db
    local_service.delete()


@pytest.fixture(scope="module")
def dashboard(service: tuple[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    url, db = service
    port = free_port()
    log = tmp_path_factory.mktemp("dash-log") / "streamlit.log"
    cmd = [
        sys.executable, "-m", "streamlit", "run", str(ROOT / "dashboard/streamlit_app.py"),
        "--server.headless", "true", "--server.address", "127.0.0.1", "--server.port", str(port),
        "--browser.gatherUsageStats", "false",
        "--", "--database-url", db, "--service-url", url, "--refresh-s", "1",
        "--load-window-s", str(LOAD_WINDOW_S),
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT), "SEER_OPERATOR_TOKEN": ""}
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{base}/_stcore/health", timeout=2).text == "ok":
                    break
            except httpx.HTTPError:
                pass
            assert proc.poll() is None, log.read_text()[-2000:]
            assert time.monotonic() < deadline, "streamlit not healthy in 60 s:\n" + log.read_text()
            time.sleep(0.3)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


@pytest.fixture(scope="module")
def page(dashboard: str) -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=CHROMIUM,
            headless=True,
            args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
        )
        try:
            pg = browser.new_page()
            pg.set_default_timeout(60_000)
            yield pg
        finally:
            browser.close()


def _wait_text(page: Any, text: str, timeout_s: float = 60) -> None:
    """Wait until the page shows ``text`` (the page's text in the failure message)."""
    deadline = time.monotonic() + timeout_s
    while text not in page.inner_text("body"):
        assert time.monotonic() < deadline, f"{text!r} not shown:\n" + page.inner_text("body")
        page.wait_for_timeout(300)


def _chart(page: Any, title: str, what: str, timeout_s: float = 60) -> list[Any]:
    """``what`` (a JS expression over trace ``t``, giving a list) over the traces of the chart
    titled ``title``, from plotly's own figure data; waits until it is non-empty."""
    script = f"""() => [...document.querySelectorAll('.js-plotly-plot')]
        .filter(e => ((e.layout && e.layout.title && e.layout.title.text) || '')
            .includes({title!r}))
        .flatMap(e => e.data.flatMap(t => {what}))"""
    deadline = time.monotonic() + timeout_s
    while not (got := page.evaluate(script)):
        assert time.monotonic() < deadline, f"no {title!r} data:\n" + page.inner_text("body")
        page.wait_for_timeout(300)
    return list(got)


def _load_running(page: Any) -> list[float]:
    """Every value of the replica-load chart's "running" traces (its first subplot)."""
    return [float(y) for y in _chart(page, "Replica load", "(t.yaxis || 'y') === 'y' ? t.y : []")]


def test_the_now_url_opens_without_a_dialog_and_the_toolbar_is_minimal(
    dashboard: str, page: Any
) -> None:
    """/now is the default page's own URL (the sidebar links to it): it showed a "Page not
    found" dialog over the page. Streamlit's "Deploy" button does not belong to an operator
    tool (toolbarMode minimal, from the repository's .streamlit/config.toml)."""
    for path in ("/now", "/"):
        page.goto(f"{dashboard}{path}")
        page.get_by_role("heading", name="Now").wait_for()
        page.wait_for_timeout(1500)  # the dialog arrived with the first script run
        assert page.get_by_text("Page not found").count() == 0, path
        assert page.get_by_role("dialog").count() == 0, path
        assert page.get_by_role("button", name="Deploy").count() == 0, path
    assert page.url.endswith("/now")  # "/" opens Now at its own URL


def _finished(page: Any) -> int:
    text = page.get_by_text("requests finished").first.inner_text(timeout=60_000)
    return int(text.split(" / ")[0].strip())


def test_progress_updates_live_while_a_rollout_runs(
    service: tuple[str, str], dashboard: str, page: Any
) -> None:
    url, _ = service
    # the page must first show the job while it runs: on a loaded machine a rollout can end
    # before the page has loaded, and then another one is started (a few tries, not a timing)
    for _attempt in range(3):
        r = httpx.post(
            f"{url}/v1/rollouts",
            json={
                "prompts": [f"prompt {i}" for i in range(12)],
                "group_size": 4,
                "max_tokens": 400,
            },
            timeout=30,
        )
        assert r.status_code == 202, r.text
        job = r.json()["id"]
        page.goto(f"{dashboard}/now")
        _wait_text(page, job)
        page.evaluate("window.__seer_no_reload = true")
        first = _finished(page)
        if first < 48:
            break
    assert first < 48, "every rollout ended before the page first showed it"
    deadline = time.monotonic() + 90
    seen = first
    while seen <= first or seen < 48:  # it advanced, and the job is done
        assert time.monotonic() < deadline, f"progress stuck at {seen} (first {first})"
        page.wait_for_timeout(500)
        seen = _finished(page)
    assert page.evaluate("window.__seer_no_reload") is True  # same document: no reload
    # the replica-load chart drew the job's own load: some replica ran sequences
    assert max(_load_running(page)) > 0
    # the timeline drew every request's chunks (chunk_tokens 8: several per request), in
    # one colour per replica
    rows = _chart(page, "Requests over time", "t.y")
    assert len(set(rows)) == 48 and len(rows) > 48
    names = _chart(page, "Requests over time", "[t.name]")
    assert {n.split(" ")[0] for n in names} == {"replica-0", "replica-1"}
    # the finished job's chart still shows its run, not the idle service's samples since (the
    # chart drew the last LOAD_WINDOW_S before the newest sample: a flat 0 line by now)
    time.sleep(LOAD_WINDOW_S + 2)
    page.reload()
    _wait_text(page, job)
    assert max(_load_running(page), default=0) > 0
    status = httpx.get(f"{url}/v1/rollouts/{job}", timeout=10).json()
    assert status["progress"]["requests_done"] == 48


def test_a_tuning_change_reaches_the_service(
    service: tuple[str, str], dashboard: str, page: Any
) -> None:
    url, _ = service
    before = httpx.get(f"{url}/v1/speculation", timeout=10).json()
    want = 3 if before["settings"]["max_draft"] != 3 else 2
    page.goto(f"{dashboard}/tuning")
    page.get_by_text("Change speculation settings").wait_for()
    box = page.get_by_label("max_draft")
    box.fill(str(want))
    box.press("Tab")
    page.get_by_label("reason (kept in the audit log)").fill("browser test")
    page.get_by_label("operator token").fill(TOKEN)
    page.get_by_role("button", name="Apply").click()
    page.get_by_text(f"Applied as version {before['version'] + 1}").wait_for()
    after = httpx.get(f"{url}/v1/speculation", timeout=10).json()
    assert after["settings"]["max_draft"] == want and after["version"] == before["version"] + 1
    assert after["reason"] == "browser test"
    # the audit log (read from the store, refreshed by the page) shows the change; the table
    # is drawn on a canvas, its cells are in the DOM for accessibility but hidden
    change = f"max_draft: {before['settings']['max_draft']} → {want}"
    page.get_by_text(change).first.wait_for(state="attached")
