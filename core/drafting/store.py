"""The grouped draft store: lifecycle of many groups' indexes (the paper's DGDS state).

Invariant: a group exists between ``register_group`` and ``release_group``; every other call on
a group that is not registered raises ``DraftLifecycleError`` naming it. Deltas carry the exact
append log, so ``import_delta(export_since(g, v))`` onto a replica copy at version ``v`` leaves it
identical to the source at the delta's ``to_version``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace

from pydantic import BaseModel, ConfigDict, Field, model_validator

from core.drafting.draft import Draft
from core.drafting.group import DraftLifecycleError, GroupIndex, GroupMemory
from core.drafting.speculate import SpeculationParams

DEFAULT_PARAMS = SpeculationParams()  # what a speculation given no params uses


class TokenRun(BaseModel):
    """Consecutive tokens appended for one request."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    request_id: str = Field(min_length=1)
    token_ids: list[int] = Field(min_length=1)


class GroupDelta(BaseModel):
    """Everything appended to a group after ``from_version``, up to ``to_version``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    group_id: str = Field(min_length=1)
    prompt_token_ids: list[int] = Field(min_length=1)
    from_version: int = Field(ge=0)
    to_version: int = Field(ge=0)
    runs: list[TokenRun] = Field(default_factory=list)

    @model_validator(mode="after")
    def _versions_match_runs(self) -> GroupDelta:
        n = sum(len(r.token_ids) for r in self.runs)
        if self.to_version - self.from_version != n:
            raise ValueError(
                f"delta {self.group_id!r}: versions {self.from_version}->{self.to_version} "
                f"but runs hold {n} tokens"
            )
        return self


class DraftStore:
    """Group indexes by id, with the register / add / speculate / release lifecycle."""

    def __init__(self, own_index: bool = False) -> None:
        """``own_index``: every group also keeps per-request own-text automata (needed by
        drafts with ``own_weight > 0``; one more append per token)."""
        self.own_index = own_index
        self._groups: dict[str, GroupIndex] = {}

    def __contains__(self, group_id: object) -> bool:
        return group_id in self._groups

    def group_ids(self) -> list[str]:
        return list(self._groups)

    def group(self, group_id: str) -> GroupIndex:
        g = self._groups.get(group_id)
        if g is None:
            raise DraftLifecycleError(
                f"group {group_id!r} is not registered (registered: {len(self._groups)} groups)"
            )
        return g

    def register_group(self, group_id: str, prompt_token_ids: Sequence[int]) -> None:
        if group_id in self._groups:
            raise DraftLifecycleError(f"group {group_id!r} is already registered")
        if not prompt_token_ids:
            raise ValueError(f"group {group_id!r}: prompt_token_ids is empty")
        self._groups[group_id] = GroupIndex(group_id, prompt_token_ids, self.own_index)

    def add_tokens(self, group_id: str, request_id: str, token_ids: Iterable[int]) -> None:
        self.group(group_id).add_tokens(request_id, token_ids)

    def speculate(
        self, group_id: str, request_id: str, params: SpeculationParams = DEFAULT_PARAMS
    ) -> Draft:
        """Draft for a request: up to ``params.max_draft`` nodes, ``params.width`` branches per
        node, scored as ``params`` says (``SpeculationParams``; ``own_weight`` > 0 needs a store
        built with ``own_index=True``)."""
        return self.group(group_id).speculate(request_id, params)

    def batch_speculate(
        self, requests: Sequence[tuple[str, str, int]], params: SpeculationParams = DEFAULT_PARAMS
    ) -> list[Draft]:
        """The paper's ``batch_speculate``: one draft per (group_id, request_id, max_draft),
        each scored as ``params`` says.

        Every group is checked before any draft is made, so a bad id fails the whole batch.
        """
        for group_id, _, _ in requests:
            self.group(group_id)
        return [self.speculate(g, r, replace(params, max_draft=k)) for g, r, k in requests]

    def release_group(self, group_id: str) -> None:
        self.group(group_id)
        del self._groups[group_id]

    def version(self, group_id: str) -> int:
        return self.group(group_id).version

    def memory(self, group_id: str) -> GroupMemory:
        return self.group(group_id).memory()

    def total_bytes(self) -> int:
        return sum(g.memory().approx_bytes for g in self._groups.values())

    def check_integrity(self, group_id: str) -> None:
        self.group(group_id).check()

    def export_since(self, group_id: str, version: int = 0) -> GroupDelta:
        g = self.group(group_id)
        runs = [TokenRun(request_id=r, token_ids=t) for r, t in g.log_since(version)]
        return GroupDelta(
            group_id=group_id,
            prompt_token_ids=list(g.prompt),
            from_version=version,
            to_version=g.version,
            runs=runs,
        )

    def import_delta(self, delta: GroupDelta) -> None:
        """Apply a delta; a delta from version 0 registers the group when it is new here."""
        g = self._groups.get(delta.group_id)
        if g is None:
            if delta.from_version != 0:
                raise DraftLifecycleError(
                    f"group {delta.group_id!r} is not registered here; a delta from version "
                    f"{delta.from_version} needs a copy at that version (export from 0)"
                )
            self.register_group(delta.group_id, delta.prompt_token_ids)
            g = self._groups[delta.group_id]
        if tuple(delta.prompt_token_ids) != g.prompt:
            raise DraftLifecycleError(f"group {delta.group_id!r}: delta prompt differs")
        if delta.from_version != g.version:
            raise DraftLifecycleError(
                f"group {delta.group_id!r}: delta starts at version {delta.from_version} but "
                f"this copy is at version {g.version}"
            )
        for run in delta.runs:
            g.add_tokens(run.request_id, run.token_ids)
