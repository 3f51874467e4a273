"""Read API of the store (used by the length prior, the dashboard, the tests).

Blocking calls: from ``async def`` code run them in a thread (``asyncio.to_thread``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from app.store.config import check_url

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

#: Finish reasons whose length is a real output length (cancelled requests are not).
FINISHED = ("stop", "length")


class StoreReader:
    """Queries over one database (its own engine unless one is given)."""

    def __init__(self, url: str, engine: Engine | None = None) -> None:
        from app.store.engine import make_engine

        self.url = check_url(url)
        self.engine = engine if engine is not None else make_engine(self.url)

    def close(self) -> None:
        self.engine.dispose()

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

        from app.store.models import RequestRow as R

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

        from app.store.models import TABLES

        with self.engine.connect() as conn:
            return {
                t.name: int(conn.execute(select(func.count()).select_from(t)).scalar_one())
                for t in TABLES
            }
