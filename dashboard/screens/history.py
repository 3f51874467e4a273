"""History: every recent job (iteration) and the length prior's accuracy, live."""

from __future__ import annotations

import streamlit as st

from dashboard import ui
from dashboard.config import DashboardConfig
from dashboard.refresh import history_page


def render() -> None:
    st.title("History")
    ui.live(body, ui.config())


def body(cfg: DashboardConfig) -> None:
    with ui.guard("History"):
        d = history_page(ui.reader(cfg.database_url), cfg)
        if d is None:
            st.info("No rollout recorded yet: each job (RL iteration) appears here.")
            return
        st.dataframe(d.table, hide_index=True)
        left, right = st.columns(2)
        left.plotly_chart(d.time, key="time")
        right.plotly_chart(d.throughput, key="throughput")
        st.subheader("Length prior accuracy")
        left, right = st.columns(2)
        left.dataframe(d.accuracy, hide_index=True)
        right.plotly_chart(d.prior, key="prior")
        st.caption(
            "Prior: the geometric mean of a prompt's most recent recorded lengths before the "
            "job started (what `context-prior` seeds its estimate with); actual: the geometric "
            "mean of the group's lengths."
        )
