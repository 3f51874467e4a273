"""Where the dashboard reads and talks to, and how often it refreshes.

Precedence: command-line arguments (after ``--`` of ``streamlit run``), then environment
variables, then defaults. The database URL resolves like the service's (``app.store.config``):
``--database-url``, else ``$SEER_DATABASE_URL``, else the SQLite file in the service's data dir.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from app.env import dashboard_refresh_s, database_url, service_url
from app.store.config import check_url, resolve_url
from core.bounds import check_range

DEFAULT_SERVICE_URL = "http://127.0.0.1:8000"


@dataclass(frozen=True, slots=True)
class DashboardConfig:
    database_url: str  # a sqlite or postgresql SQLAlchemy URL (checked)
    service_url: str  # the Seer service's HTTP base URL, http(s)://...
    refresh_s: float = 3.0  # live pages re-query every refresh_s seconds, [0.5, 3600]
    bucket_s: float = 10.0  # time buckets of the speculation charts, [1, 86400]
    http_timeout_s: float = 3.0  # each call to the service gives up after this, [0.001, 60]
    history_jobs: int = 20  # jobs on the History page, [1, 1000]
    load_window_s: float = 300.0  # replica load shown: the job's last this-many s, [1, 86400]
    timeline_requests: int = 200  # request rows of the job timeline (ended last), [1, 5000]

    def __post_init__(self) -> None:
        check_url(self.database_url)
        if not self.service_url.startswith(("http://", "https://")):
            raise ValueError(f"service URL {self.service_url!r} must start with http(s)://")
        check_range("refresh_s", self.refresh_s, 0.5, 3600)
        check_range("bucket_s", self.bucket_s, 1, 86_400)
        check_range("http_timeout_s", self.http_timeout_s, 0.001, 60)
        check_range("history_jobs", self.history_jobs, 1, 1000)
        check_range("load_window_s", self.load_window_s, 1, 86_400)
        check_range("timeline_requests", self.timeline_requests, 1, 5000)


def parse_config(argv: Sequence[str], env: Mapping[str, str] | None = None) -> DashboardConfig:
    """The config from ``argv`` (the arguments after ``--``) and ``env`` (default
    ``os.environ``); ValueError naming the bad value."""
    refresh_s = dashboard_refresh_s(env)
    p = argparse.ArgumentParser(prog="seer dashboard", exit_on_error=False, add_help=False)
    p.add_argument("--database-url", default=None)
    p.add_argument("--service-url", default=service_url(env) or DEFAULT_SERVICE_URL)
    p.add_argument("--refresh-s", type=float, default=3.0 if refresh_s is None else refresh_s)
    p.add_argument("--bucket-s", type=float, default=10.0)
    p.add_argument("--history-jobs", type=int, default=20)
    p.add_argument("--load-window-s", type=float, default=300.0)
    p.add_argument("--timeline-requests", type=int, default=200)
    try:
        ns, extra = p.parse_known_args(list(argv))
    except argparse.ArgumentError as exc:
        raise ValueError(f"dashboard arguments: {exc}") from None
    if extra:
        raise ValueError(f"dashboard arguments not understood: {extra}")
    url = ns.database_url or database_url(env)
    return DashboardConfig(
        database_url=resolve_url(url),
        service_url=ns.service_url.rstrip("/"),
        refresh_s=ns.refresh_s,
        bucket_s=ns.bucket_s,
        history_jobs=ns.history_jobs,
        load_window_s=ns.load_window_s,
        timeline_requests=ns.timeline_requests,
    )
