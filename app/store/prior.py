"""``StoreLengthPrior``: ``core.scheduling.LengthPrior`` from the store's recorded lengths.

Invariant: ``lengths`` never touches the database (the scheduler calls it on its hot path, in
the service's event loop); ``prefetch`` loads the prompts of a job in one query beforehand
(blocking: run it in a thread) into a bounded cache, newest answers replacing older ones.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from typing import TYPE_CHECKING

from app.store.reader import StoreReader


class StoreLengthPrior:
    """Recent output lengths of each prompt, as recorded by earlier iterations."""

    def __init__(self, reader: StoreReader, limit: int = 16, max_prompts: int = 100_000) -> None:
        """``limit`` (>= 1): most recent lengths per prompt; ``max_prompts`` (>= 1): prompts
        kept in the cache (least recently prefetched dropped first)."""
        if limit < 1:
            raise ValueError(f"limit={limit} must be >= 1")
        if max_prompts < 1:
            raise ValueError(f"max_prompts={max_prompts} must be >= 1")
        self.reader = reader
        self.limit = limit
        self.max_prompts = max_prompts
        self._cache: OrderedDict[str, list[int]] = OrderedDict()

    def prefetch(self, prompt_keys: Iterable[str]) -> int:
        """Load the recorded lengths of ``prompt_keys`` (blocking); returns how many of them
        have a history. Keys without one are cached as unseen."""
        keys = list(dict.fromkeys(prompt_keys))
        return self.remember(keys, self.fetch(keys))

    def fetch(self, prompt_keys: Iterable[str]) -> dict[str, list[int]]:
        """The recorded lengths of ``prompt_keys`` (blocking; the cache is not touched, so a
        worker thread may run it)."""
        return self.reader.recent_lengths_many(prompt_keys, self.limit)

    def remember(self, prompt_keys: Iterable[str], found: dict[str, list[int]]) -> int:
        """Cache what ``fetch`` found for ``prompt_keys``; returns how many have a history."""
        keys = list(dict.fromkeys(prompt_keys))
        for key in keys:
            self._cache[key] = found.get(key, [])
            self._cache.move_to_end(key)
        while len(self._cache) > self.max_prompts:
            self._cache.popitem(last=False)
        return sum(1 for k in keys if found.get(k))

    def lengths(self, prompt_key: str) -> list[int] | None:
        """Recorded lengths of the prompt (None if unseen or not prefetched)."""
        got = self._cache.get(prompt_key)
        return got if got else None


if TYPE_CHECKING:
    from core.scheduling import LengthPrior

    def _implements(p: StoreLengthPrior) -> LengthPrior:  # mypy checks the protocol here
        return p
