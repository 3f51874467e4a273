"""Tuning: the live speculation settings, a form that changes them with the operator token
(typed in the browser for each change; the dashboard holds none), and the audit log."""

from __future__ import annotations

import os
from typing import Any

import streamlit as st

from app.env import OPERATOR_TOKEN_ENV
from dashboard import ui
from dashboard.config import DashboardConfig
from dashboard.refresh import audit_log
from dashboard.views import tuning as v


def render() -> None:
    st.title("Tuning")
    cfg = ui.config()
    with ui.guard("Speculation settings"):
        state = ui.client(cfg.service_url, cfg.http_timeout_s).get_speculation()
        _form(cfg, state.settings)
    ui.live(body, cfg)


def _form(cfg: DashboardConfig, current: dict[str, Any]) -> None:
    with st.form("speculation"):
        st.subheader("Change speculation settings")
        c = st.columns(2)
        edited = {
            "enabled": c[0].checkbox("enabled", bool(current.get("enabled", True))),
            "adaptive": c[1].checkbox("adaptive", bool(current.get("adaptive", True))),
            "max_draft": c[0].number_input(
                "max_draft", min_value=1, max_value=64, step=1, value=int(current["max_draft"])
            ),
            "min_token_prob": c[1].number_input(
                "min_token_prob",
                min_value=0.0,
                max_value=1.0,
                step=0.01,
                format="%.3f",
                value=float(current["min_token_prob"]),
            ),
            "probe_priority": c[0].number_input(
                "probe_priority", min_value=1.0, step=0.5, value=float(current["probe_priority"])
            ),
        }
        reason = c[1].text_input("reason (kept in the audit log)", max_chars=500)
        who = c[0].text_input("operator", value=os.environ.get("USER", "operator"), max_chars=100)
        # typed by the operator in the browser, never pre-filled: anyone who reaches this
        # page's port would otherwise hold the dashboard's own token
        token = c[1].text_input("operator token", value="", type="password")
        if not st.form_submit_button("Apply"):
            return
    change = v.changed(current, edited)
    if not change:
        st.info("Nothing changed.")
    elif not token:
        st.warning(f"An operator token is needed (the service's {OPERATOR_TOKEN_ENV}).")
    else:
        with ui.guard("Applying the change"):
            state = ui.client(cfg.service_url, cfg.http_timeout_s).set_speculation(
                change, token=token, operator=who, reason=reason or None
            )
            st.success(
                f"Applied as version {state.version}: "
                + ", ".join(f"{k} = {val}" for k, val in change.items())
            )


def body(cfg: DashboardConfig) -> None:
    with ui.guard("Speculation settings"):
        state = ui.client(cfg.service_url, cfg.http_timeout_s).get_speculation()
        st.subheader(f"Running: version {state.version}")
        if state.updated_by:
            st.caption(f"last changed by {state.updated_by}: {state.reason or 'no reason given'}")
        left, right = st.columns(2)
        left.dataframe(v.settings_rows(state), hide_index=True)
        right.dataframe(v.replica_rows(state), hide_index=True)
    with ui.guard("Audit log"):
        st.subheader("Audit log")
        rows = audit_log(ui.reader(cfg.database_url))
        if rows:
            st.dataframe(rows, hide_index=True)
        else:
            st.info("No change recorded yet.")
