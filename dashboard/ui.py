"""The Streamlit side shared by the pages: the config, the store reader and the service's
client (``app.client.SeerClient``, one per process; every call bounded by ``http_timeout_s``),
live fragments, and friendly messages instead of tracebacks."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import httpx
import streamlit as st
from pydantic import ValidationError

from app.client import SeerClient, SeerHTTPError
from app.store.config import redact
from app.store.reader import StoreReader, StoreUnavailable
from dashboard.config import DashboardConfig, parse_config

log = logging.getLogger("seer.dashboard")


def config() -> DashboardConfig:
    """From the arguments after ``--`` of ``streamlit run`` and the environment (see
    ``dashboard.config``); a bad value stops the page with a message."""
    try:
        return parse_config(sys.argv[1:])
    except ValueError as exc:
        st.error(f"Dashboard configuration: {exc}")
        st.stop()
        raise  # st.stop() raises; this keeps type checkers informed


@st.cache_resource(show_spinner=False)
def reader(url: str) -> StoreReader:
    return StoreReader(url)


@st.cache_resource(show_spinner=False)
def client(url: str, timeout_s: float) -> SeerClient:
    return SeerClient(url.rstrip("/"), timeout=timeout_s)


def refusal(exc: SeerHTTPError) -> str:
    """An error answer in words: its status and ``detail`` (a 422's refused values as
    "field: message")."""
    if exc.field_errors:
        detail = "; ".join(
            f"{'.'.join(str(x) for x in e.loc if x not in ('body', 'settings')) or 'request'}: "
            f"{e.msg}"
            for e in exc.field_errors
        )
    else:
        detail = str(exc.detail)[:500]
    return f"HTTP {exc.status_code}: {detail}"


def live(body: Callable[[DashboardConfig], None], cfg: DashboardConfig) -> None:
    """Run ``body`` now and again every ``cfg.refresh_s`` seconds (a Streamlit fragment: only
    it reruns, the rest of the page and its widgets stay)."""
    st.fragment(body, run_every=cfg.refresh_s)(cfg)


@contextmanager
def guard(what: str) -> Iterator[None]:
    """Show a failure of ``what`` as a message, never as a traceback: nothing recorded yet is
    an info, an unreachable store or service a warning, anything else an error (logged)."""
    try:
        yield
    except StoreUnavailable as exc:
        if exc.empty:
            st.info(f"Nothing recorded yet: {exc}.")
        else:
            st.warning(f"{what}: the history store cannot be read: {exc}")
    except httpx.HTTPError as exc:  # no answer
        st.warning(
            f"{what}: the service is unreachable: {type(exc).__name__}: {exc}. Is the service "
            "running (`./run.sh`)?"
        )
    except SeerHTTPError as exc:
        st.warning(f"{what}: the service answered {refusal(exc)}")
    except ValidationError as exc:  # not JSON, or not the API's model
        st.warning(f"{what}: unexpected answer from the service: {exc}")
    except Exception as exc:
        log.exception("dashboard: %s failed", what)
        st.error(f"{what} failed: {type(exc).__name__}: {exc}")


def sidebar(cfg: DashboardConfig) -> None:
    st.sidebar.caption(
        f"Store: `{redact(cfg.database_url)}`  \nService: `{cfg.service_url}`  \n"
        f"Refresh: every {cfg.refresh_s:g} s"
    )
