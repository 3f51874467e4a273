"""Now: the running (else the latest) job, live."""

from __future__ import annotations

import time

import streamlit as st

from app.client import SeerHTTPError
from app.store.views import JobView
from dashboard import ui
from dashboard.config import DashboardConfig
from dashboard.refresh import NowData, now_page
from dashboard.views import now as v
from dashboard.views.common import num, seconds


def render() -> None:
    st.title("Now")
    ui.live(body, ui.config())


def body(cfg: DashboardConfig) -> None:
    job = None
    with ui.guard("Job progress"):
        data = now_page(ui.reader(cfg.database_url), cfg, time.time())
        if data is None:
            st.info(
                "No rollout recorded yet. Start the service with the store on (`./run.sh`) "
                "and send a rollout (`seer demo`)."
            )
        else:
            job = data.job
            _job(data)
    with ui.guard("Service"):
        _service(cfg, job)


def _job(d: NowData) -> None:
    job, p = d.job, d.progress
    it = f" · iteration {job.iteration}" if job.iteration is not None else ""
    st.subheader(f"Job `{job.job_id}`{it} · {job.policy} · {job.state}")
    st.progress(p.fraction, text=f"{p.finished} / {p.total} requests finished")
    c = st.columns(5)
    c[0].metric("elapsed", f"{p.elapsed_s:,.1f} s")
    c[1].metric("output tokens", f"{p.output_tokens:,}")
    c[2].metric("tokens / s", f"{p.tokens_per_s:,.0f}")
    c[3].metric("groups done", f"{sum(1 for g in d.groups if g.final_lengths)} / {len(d.groups)}")
    c[4].metric("tail (last 10%)", seconds(p.tail_s))
    if job.error:
        st.warning(f"Job error: {job.error}")
    left, right = st.columns(2)
    left.plotly_chart(d.finished, key="finished")
    right.plotly_chart(d.group_chart, key="groups")
    err = d.estimate_error
    right.caption(
        "Estimates as made when a group's first request finished. Median error of finished "
        f"groups: {'-' if err is None else num(100 * err, 0) + '%'}"
    )
    st.plotly_chart(d.load, key="load")
    st.plotly_chart(d.timeline, key="timeline")


def _service(cfg: DashboardConfig, job: JobView | None) -> None:
    client = ui.client(cfg.service_url, cfg.http_timeout_s)
    health = client.health()
    st.caption(
        f"Service {cfg.service_url}: **{health.status}** · policy {health.policy} · "
        f"{health.open_jobs} open job(s) · {'accepting' if health.accepting else 'not accepting'}"
    )
    st.dataframe(v.replica_rows(health), hide_index=True)
    if job is not None and job.state == "running":
        try:
            status = client.status(job.job_id)
        except SeerHTTPError:  # a job of an earlier run of the service: the store knows it only
            return
        left = status.progress.estimated_remaining_s
        st.caption(
            f"The service reports job `{job.job_id}` {status.state.value}: "
            f"{status.progress.requests_done} / {status.progress.requests} requests done"
            + ("" if left is None else f", about {left:,.0f} s left")
        )
