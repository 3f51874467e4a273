"""Read API of the store (used by the length prior, the dashboard, the tests).

Blocking calls: from ``async def`` code run them in a thread (``asyncio.to_thread``).
The dashboard's queries (``app.store.views`` results) raise ``StoreUnavailable`` instead of a
SQLAlchemy error: ``empty`` when there is simply nothing recorded yet (no SQLite file, no
tables), otherwise the database could not be read (down, locked past the busy timeout).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from app.store.config import check_url, redact
from app.store.views import (
    ChunkSpan,
    ConfigVersion,
    DraftTotals,
    FinishedRequest,
    GroupView,
    JobTiming,
    JobView,
    PromptLengths,
    ReplicaLoad,
    TokenBucket,
)

if TYPE_CHECKING:
    from sqlalchemy import Connection
    from sqlalchemy.engine import Engine

#: Finish reasons whose length is a real output length (cancelled requests are not).
FINISHED = ("stop", "length")


class StoreUnavailable(RuntimeError):
    """The store cannot answer: ``empty`` = nothing recorded there yet (a state, not a fault)."""

    def __init__(self, message: str, empty: bool) -> None:
        super().__init__(message)
        self.empty = empty


class StoreReader:
    """Queries over one database (its own engine unless one is given)."""

    def __init__(self, url: str, engine: Engine | None = None) -> None:
        from app.store.engine import make_engine

        self.url = check_url(url)
        self.engine = engine if engine is not None else make_engine(self.url)

    def close(self) -> None:
        self.engine.dispose()

    @contextlib.contextmanager
    def _read(self) -> Iterator[Connection]:
        """A connection whose SQLAlchemy errors become ``StoreUnavailable``. A SQLite file that
        does not exist is reported as empty without creating it."""
        from sqlalchemy.engine import make_url
        from sqlalchemy.exc import SQLAlchemyError

        u = make_url(self.url)
        if u.get_backend_name() == "sqlite" and u.database and u.database != ":memory:":
            path = Path(u.database).expanduser()
            if not path.is_file():
                raise StoreUnavailable(f"no database yet at {path}", empty=True)
        try:
            with self.engine.connect() as conn:
                yield conn
        except SQLAlchemyError as exc:
            orig = getattr(exc, "orig", None) or exc
            text = str(orig)
            if "no such table" in text or type(orig).__name__ == "UndefinedTable":
                raise StoreUnavailable(
                    f"the database {redact(self.url)} has no Seer tables yet "
                    "(start the service with the store on, or run `seer db upgrade`)",
                    empty=True,
                ) from exc
            raise StoreUnavailable(
                f"cannot read {redact(self.url)}: {type(exc).__name__}: {text.splitlines()[0]}",
                empty=False,
            ) from exc

    def recent_lengths(self, prompt_key: str, limit: int) -> list[int]:
        """Output lengths of the ``limit`` most recently finished requests of the prompt
        ``prompt_key`` (the trainer's prompt id, else the prompt's hash; see
        ``app.store.keys``), newest first; cancelled requests excluded."""
        return self.recent_lengths_many([prompt_key], limit).get(prompt_key, [])

    def recent_lengths_many(self, prompt_keys: Iterable[str], limit: int) -> dict[str, list[int]]:
        """``recent_lengths`` of many prompts in one query per 500 keys (keys never seen are
        absent from the result)."""
        if limit < 1:
            raise ValueError(f"limit={limit} must be >= 1")
        from sqlalchemy import func, select

        from app.store.tables import RequestRow as R

        keys = sorted(set(prompt_keys))
        out: dict[str, list[int]] = {}
        with self.engine.connect() as conn:
            for i in range(0, len(keys), 500):
                part = keys[i : i + 500]
                rank = (
                    func.row_number()
                    .over(partition_by=R.prompt_key, order_by=(R.finished_at.desc(), R.id.desc()))
                    .label("rank")
                )
                inner = (
                    select(R.prompt_key, R.length, R.finished_at, R.id, rank)
                    .where(R.prompt_key.in_(part), R.finish_reason.in_(FINISHED))
                    .subquery()
                )
                rows = conn.execute(
                    select(inner.c.prompt_key, inner.c.length)
                    .where(inner.c.rank <= limit)
                    .order_by(inner.c.prompt_key, inner.c.rank)
                )
                for key, length in rows:
                    out.setdefault(key, []).append(int(length))
        return out

    def counts(self) -> dict[str, int]:
        """Rows per table (tests, ``seer db current``)."""
        from sqlalchemy import func, select

        from app.store.tables import TABLES

        with self.engine.connect() as conn:
            return {
                t.name: int(conn.execute(select(func.count()).select_from(t)).scalar_one())
                for t in TABLES
            }

    # ------------------------------------------------------------------ dashboard queries
    def jobs(self, limit: int = 20) -> list[JobView]:
        """The ``limit`` most recently started jobs, newest first."""
        from sqlalchemy import select

        from app.store.tables import JobRow as J

        with self._read() as conn:
            rows = conn.execute(select(J).order_by(J.started_at.desc(), J.id.desc()).limit(limit))
            jobs = list(rows)
            sizes = self._job_sizes(conn, [j.job_id for j in jobs])
        return [_job_view(j, *sizes.get(j.job_id, (0, 0))) for j in jobs]

    def current_job(self) -> JobView | None:
        """The newest running job, else the newest job (None: no job recorded)."""
        from sqlalchemy import select

        from app.store.tables import JobRow as J

        newest = (J.started_at.desc(), J.id.desc())
        with self._read() as conn:
            row = conn.execute(
                select(J).where(J.state == "running").order_by(*newest).limit(1)
            ).first()
            if row is None:
                row = conn.execute(select(J).order_by(*newest).limit(1)).first()
            if row is None:
                return None
            sizes = self._job_sizes(conn, [row.job_id])
        return _job_view(row, *sizes.get(row.job_id, (0, 0)))

    @staticmethod
    def _job_sizes(conn: Connection, job_ids: Sequence[str]) -> dict[str, tuple[int, int]]:
        """job id -> (requests asked for, requests terminal so far)."""
        from sqlalchemy import func, select

        from app.store.tables import GroupRow as G
        from app.store.tables import RequestRow as R

        if not job_ids:
            return {}
        asked = conn.execute(
            select(G.job_id, func.sum(G.group_size)).where(G.job_id.in_(job_ids)).group_by(G.job_id)
        )
        done = dict(
            conn.execute(
                select(G.job_id, func.count(R.id))
                .join(R, R.group_id == G.group_id)
                .where(G.job_id.in_(job_ids))
                .group_by(G.job_id)
            ).all()
        )
        return {job: (int(n or 0), int(done.get(job, 0))) for job, n in asked}

    def job_requests(self, job_id: str) -> list[FinishedRequest]:
        """The job's terminal requests in finishing order."""
        from sqlalchemy import select

        from app.store.tables import GroupRow as G
        from app.store.tables import RequestRow as R

        with self._read() as conn:
            rows = conn.execute(
                select(
                    R.request_id,
                    R.group_id,
                    R.length,
                    R.is_probe,
                    R.finish_reason,
                    R.queued_at,
                    R.finished_at,
                )
                .join(G, G.group_id == R.group_id)
                .where(G.job_id == job_id)
                .order_by(R.finished_at, R.id)
            )
            return [FinishedRequest(*r) for r in rows]

    def groups(self, job_ids: Sequence[str]) -> list[GroupView]:
        """The groups of these jobs, each with the scheduler's last length estimate."""
        from sqlalchemy import select

        from app.store.tables import GroupEstimateRow as E
        from app.store.tables import GroupRow as G

        if not job_ids:
            return []
        with self._read() as conn:
            first: dict[str, tuple[int | None, int | None]] = {}
            last: dict[str, tuple[int | None, int | None, int]] = {}
            for gid, e_mx, e_mean, e_fin in conn.execute(
                select(E.group_id, E.max_estimate, E.mean_estimate, E.finished)
                .join(G, G.group_id == E.group_id)
                .where(G.job_id.in_(job_ids))
                .order_by(E.at, E.id)
            ):
                first.setdefault(gid, (int(e_mx), int(e_mean)))
                last[gid] = (int(e_mx), int(e_mean), int(e_fin))
            rows = conn.execute(
                select(G).where(G.job_id.in_(job_ids)).order_by(G.submitted_at, G.id)
            )
            out = []
            for g in rows:
                f_mx, f_mean = first.get(g.group_id, (None, None))
                mx, mean, fin = last.get(g.group_id, (None, None, 0))
                lens = tuple(int(x) for x in g.final_lengths) if g.final_lengths else None
                out.append(
                    GroupView(
                        job_id=g.job_id,
                        group_id=g.group_id,
                        prompt_key=g.prompt_key,
                        group_size=g.group_size,
                        max_tokens=g.max_tokens,
                        submitted_at=g.submitted_at,
                        finished_at=g.finished_at,
                        final_lengths=lens,
                        first_max_estimate=f_mx,
                        first_mean_estimate=f_mean,
                        max_estimate=mx,
                        mean_estimate=mean,
                        estimate_finished=fin or 0,
                    )
                )
            return out

    def replica_load(self, since: float, until: float | None = None) -> list[ReplicaLoad]:
        """Load samples of every replica taken in [``since``, ``until``] (no end: up to now),
        oldest first."""
        from sqlalchemy import select

        from app.store.tables import ReplicaLoadRow as L

        q = select(L.replica_id, L.at, L.running, L.waiting, L.chunks_in_flight, L.kv_usage)
        q = q.where(L.at >= since)
        if until is not None:
            q = q.where(L.at <= until)
        with self._read() as conn:
            rows = conn.execute(q.order_by(L.at, L.id))
            return [ReplicaLoad(*r) for r in rows]

    def acceptance_over_time(self, bucket_s: float, job_id: str | None = None) -> list[DraftTotals]:
        """Draft statistics summed per ``bucket_s`` of time (of one job, or of all), oldest
        first; ``key`` is the bucket start."""
        from sqlalchemy import func, select

        from app.store.tables import AcceptanceRow as A
        from app.store.tables import GroupRow as G

        b = func.floor(A.bucket / bucket_s) * bucket_s
        q = select(b, func.sum(A.drafted), func.sum(A.accepted), func.sum(A.steps))
        if job_id is not None:
            q = q.join(G, G.group_id == A.group_id).where(G.job_id == job_id)
        with self._read() as conn:
            rows = conn.execute(q.group_by(b).order_by(b))
            return [DraftTotals(float(k), int(d), int(a), int(s)) for k, d, a, s in rows]

    def acceptance_by_group(self, job_id: str) -> list[DraftTotals]:
        """Draft statistics of each group of the job that drafted; ``key`` is the group id."""
        from sqlalchemy import func, select

        from app.store.tables import AcceptanceRow as A
        from app.store.tables import GroupRow as G

        with self._read() as conn:
            rows = conn.execute(
                select(A.group_id, func.sum(A.drafted), func.sum(A.accepted), func.sum(A.steps))
                .join(G, G.group_id == A.group_id)
                .where(G.job_id == job_id)
                .group_by(A.group_id)
                .order_by(A.group_id)
            )
            return [DraftTotals(str(k), int(d), int(a), int(s)) for k, d, a, s in rows]

    def tokens_over_time(self, bucket_s: float, job_id: str) -> list[TokenBucket]:
        """Output tokens and chunks of the job per ``bucket_s`` of time, oldest first."""
        from sqlalchemy import func, select

        from app.store.tables import ChunkRow as C
        from app.store.tables import GroupRow as G

        b = func.floor(C.at / bucket_s) * bucket_s
        with self._read() as conn:
            rows = conn.execute(
                select(b, func.sum(C.new_tokens), func.count(C.id))
                .join(G, G.group_id == C.group_id)
                .where(G.job_id == job_id)
                .group_by(b)
                .order_by(b)
            )
            return [TokenBucket(float(k), int(t), int(n)) for k, t, n in rows]

    def job_chunks(self, job_id: str, max_requests: int = 200) -> list[ChunkSpan]:
        """The chunks of the job's ``max_requests`` requests whose latest chunk ended last (the
        tail is where a timeline is read), by request, oldest chunk first."""
        from sqlalchemy import func, select

        from app.store.tables import ChunkRow as C
        from app.store.tables import GroupRow as G

        last = (
            select(C.request_id)
            .join(G, G.group_id == C.group_id)
            .where(G.job_id == job_id)
            .group_by(C.request_id)
            .order_by(func.max(C.at).desc(), C.request_id)
            .limit(max_requests)
            .subquery()
        )
        with self._read() as conn:
            rows = conn.execute(
                select(
                    C.request_id,
                    C.group_id,
                    C.replica_id,
                    C.started_at,
                    C.at,
                    C.new_tokens,
                    C.drafted,
                    C.finish_reason,
                )
                .join(G, G.group_id == C.group_id)
                .where(G.job_id == job_id, C.request_id.in_(select(last.c.request_id)))
                .order_by(C.request_id, C.at, C.id)
            )
            return [ChunkSpan(*r) for r in rows]

    def job_timings(self, job_ids: Sequence[str]) -> dict[str, JobTiming]:
        """Finish-time summary of each job's finished requests (jobs with none are absent)."""
        from sqlalchemy import func, select

        from app.store.tables import GroupRow as G
        from app.store.tables import RequestRow as R

        if not job_ids:
            return {}
        rank = func.row_number().over(partition_by=G.job_id, order_by=R.finished_at)
        total = func.count().over(partition_by=G.job_id)
        inner = (
            select(
                G.job_id,
                R.finished_at,
                R.length,
                rank.label("rank"),
                total.label("n"),
            )
            .join(G, G.group_id == R.group_id)
            .where(G.job_id.in_(job_ids), R.finish_reason.in_(FINISHED))
            .subquery()
        )
        c = inner.c
        # ts[ceil(0.9 n) - 1] (0-based) is the request of rank r with 10 r >= 9 n (1-based).
        tail = func.min(c.finished_at).filter(c.rank * 10 >= c.n * 9)
        with self._read() as conn:
            rows = conn.execute(
                select(
                    c.job_id,
                    func.count(),
                    func.sum(c.length),
                    func.min(c.finished_at),
                    tail,
                    func.max(c.finished_at),
                ).group_by(c.job_id)
            )
            return {
                job: JobTiming(job, int(n), int(tok), float(lo), float(t), float(hi))
                for job, n, tok, lo, t, hi in rows
            }

    def prompt_lengths(self, prompt_keys: Iterable[str], before: float) -> list[PromptLengths]:
        """Finished lengths of each prompt recorded before ``before``, oldest first."""
        from sqlalchemy import select

        from app.store.tables import RequestRow as R

        keys = sorted(set(prompt_keys))
        got: dict[str, list[tuple[float, int]]] = {}
        with self._read() as conn:
            for i in range(0, len(keys), 500):
                rows = conn.execute(
                    select(R.prompt_key, R.finished_at, R.length)
                    .where(
                        R.prompt_key.in_(keys[i : i + 500]),
                        R.finish_reason.in_(FINISHED),
                        R.finished_at < before,
                    )
                    .order_by(R.finished_at, R.id)
                )
                for key, at, length in rows:
                    got.setdefault(key, []).append((float(at), int(length)))
        return [PromptLengths(k, tuple(v)) for k, v in sorted(got.items())]

    def config_versions(self, limit: int = 50) -> list[ConfigVersion]:
        """The newest ``limit`` speculation settings changes, newest first."""
        from sqlalchemy import select

        from app.store.tables import SpeculationConfigRow as S

        with self._read() as conn:
            rows = conn.execute(
                select(S.at, S.who, S.old, S.new, S.reason)
                .order_by(S.at.desc(), S.id.desc())
                .limit(limit)
            )
            return [ConfigVersion(float(a), w, dict(o), dict(n), r) for a, w, o, n, r in rows]


def _job_view(row: Any, requests: int, finished: int) -> JobView:
    """``row``: a result row of ``JobRow``'s columns."""
    return JobView(
        job_id=row.job_id,
        iteration=row.iteration,
        policy=row.policy,
        state=row.state,
        groups=row.groups,
        requests=requests,
        requests_finished=finished,
        max_tokens=row.max_tokens,
        created_at=row.created_at,
        started_at=row.started_at,
        finished_at=row.finished_at,
        output_tokens=row.output_tokens,
        error=row.error,
    )
