"""The Streamlit side shared by the pages: the config, the store reader and service client
(one per process), live fragments, and friendly messages instead of tracebacks."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import streamlit as st

from app.store.config import redact
from app.store.reader import StoreReader, StoreUnavailable
from dashboard.client import ServiceClient, ServiceError, ServiceUnreachable
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
def client(url: str, timeout_s: float) -> ServiceClient:
    return ServiceClient(url, timeout_s)


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
    except ServiceUnreachable as exc:
        st.warning(f"{what}: {exc}. Is the service running (`./run.sh`)?")
    except ServiceError as exc:
        st.warning(f"{what}: the service answered {exc}")
    except Exception as exc:
        log.exception("dashboard: %s failed", what)
        st.error(f"{what} failed: {type(exc).__name__}: {exc}")


def sidebar(cfg: DashboardConfig) -> None:
    st.sidebar.caption(
        f"Store: `{redact(cfg.database_url)}`  \nService: `{cfg.service_url}`  \n"
        f"Refresh: every {cfg.refresh_s:g} s"
    )
