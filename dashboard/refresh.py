"""What one refresh of each page computes from the store: its queries and its figures, in one
plain function per page (the pages render the result; ``lab.bench.dashboard_refresh`` times
them)."""

from __future__ import annotations

from dataclasses import dataclass

import plotly.graph_objects as go

from app.store.config import StoreConfig
from app.store.reader import StoreReader
from app.store.views import ConfigVersion, DraftTotals, GroupView, JobView
from dashboard.config import DashboardConfig
from dashboard.views import history as hv
from dashboard.views import now as nv
from dashboard.views import speculation as sv
from dashboard.views import timeline as tl
from dashboard.views import tuning as tv


@dataclass(frozen=True)
class NowData:
    job: JobView
    progress: nv.Progress
    groups: list[GroupView]
    estimate_error: float | None
    finished: go.Figure
    group_chart: go.Figure
    load: go.Figure
    timeline: go.Figure


def now_page(r: StoreReader, cfg: DashboardConfig, now: float) -> NowData | None:
    """None: no job recorded."""
    job = r.current_job()
    if job is None:
        return None
    requests = r.job_requests(job.job_id)
    groups = r.groups([job.job_id])
    return NowData(
        job=job,
        progress=nv.progress(job, requests, now),
        groups=groups,
        estimate_error=nv.estimate_error(groups),
        finished=nv.finished_figure(job, requests, now),
        group_chart=nv.group_figure(groups, requests),
        load=nv.load_figure(r.replica_load(*nv.load_window(job, now, cfg.load_window_s))),
        timeline=tl.timeline_figure(
            job, r.job_chunks(job.job_id, cfg.timeline_requests), requests, cfg.timeline_requests
        ),
    )


@dataclass(frozen=True)
class SpeculationData:
    job: JobView
    total: DraftTotals
    drafted_groups: int
    timeline: go.Figure
    per_group: go.Figure


def speculation_page(r: StoreReader, cfg: DashboardConfig) -> SpeculationData | None:
    job = r.current_job()
    if job is None:
        return None
    drafts = r.acceptance_over_time(cfg.bucket_s, job.job_id)
    buckets = sv.timeline(drafts, r.tokens_over_time(cfg.bucket_s, job.job_id))
    per_group = r.acceptance_by_group(job.job_id)
    return SpeculationData(
        job=job,
        total=sv.overall(drafts),
        drafted_groups=len(per_group),
        timeline=sv.timeline_figure(buckets, r.config_versions(limit=50)),
        per_group=sv.group_figure(per_group),
    )


@dataclass(frozen=True)
class HistoryData:
    table: list[dict[str, object]]
    time: go.Figure
    throughput: go.Figure
    accuracy: list[dict[str, object]]
    prior: go.Figure


def history_page(r: StoreReader, cfg: DashboardConfig) -> HistoryData | None:
    jobs = r.jobs(cfg.history_jobs)
    if not jobs:
        return None
    ids = [j.job_id for j in jobs]
    rows = hv.summaries(jobs, r.job_timings(ids))
    groups = r.groups(ids)
    prompts = r.prompt_lengths({g.prompt_key for g in groups}, max(j.started_at for j in jobs))
    points = hv.prior_points(jobs, groups, prompts, StoreConfig().prior_limit)
    return HistoryData(
        table=hv.table(rows),
        time=hv.time_figure(rows),
        throughput=hv.throughput_figure(rows),
        accuracy=hv.accuracy_table(hv.accuracy(rows, points)),
        prior=hv.prior_figure(points),
    )


def audit_log(r: StoreReader, limit: int = 100) -> list[dict[str, object]]:
    versions: list[ConfigVersion] = r.config_versions(limit=limit)
    return tv.audit_rows(versions)
