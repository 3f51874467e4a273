"""Speculation: acceptance and draft length of the current job, live."""

from __future__ import annotations

import streamlit as st

from dashboard import ui
from dashboard.config import DashboardConfig
from dashboard.refresh import speculation_page
from dashboard.views.common import num


def render() -> None:
    st.title("Speculation")
    ui.live(body, ui.config())


def body(cfg: DashboardConfig) -> None:
    with ui.guard("Speculation"):
        d = speculation_page(ui.reader(cfg.database_url), cfg)
        if d is None:
            st.info("No rollout recorded yet: acceptance appears here once a job drafts.")
            return
        st.subheader(f"Job `{d.job.job_id}` · {d.job.policy} · {d.job.state}")
        c = st.columns(4)
        c[0].metric("acceptance length", num(d.total.acceptance_length))
        c[1].metric("acceptance rate", num(d.total.acceptance_rate))
        c[2].metric("draft tokens / verify step", num(d.total.draft_length))
        c[3].metric("groups that drafted", f"{d.drafted_groups} / {d.job.groups}")
        if not d.total.steps:
            st.info("This job has not drafted (speculation off, or no chunk finished yet).")
        st.plotly_chart(d.timeline, key="timeline")
        st.caption(
            f"Buckets of {cfg.bucket_s:g} s. Dotted lines: speculation settings changed "
            "(see Tuning). Draft tokens per decode step counts every chunk: 0 means the "
            "adaptive policy (or an operator) had speculation off."
        )
        st.plotly_chart(d.per_group, key="groups")
