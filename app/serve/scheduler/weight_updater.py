"""Policy weight updates: drain the chunks in flight, load into every replica, verify, resume;
and a replica found on other weights is brought onto the current ones before it rejoins.

Invariants (``app.api.operator`` states what they give a trainer):
- One update at a time, and ``weight_version`` only grows (409 otherwise).
- No chunk runs during an update: dispatch is paused before the drain and resumed after it,
  whatever the outcome; a request holding tokens of the old version restarts from its prompt.
- Verified where loaded: with the trainer's digest a replica reading another checkpoint loads
  nothing (when none loaded, that digest was the caller's error: 422 naming what each read);
  without, the digest most replicas read is the agreed one, and a replica that read
  other bytes is FAILED. The state changes only when at least one replica loaded the weights.
- Until this scheduler updates the weights itself and while no replica is in rotation, the
  newest version a replica reports with its checkpoint becomes the current one (``adopt``): a
  scheduler restarted after an update (Serve does, when its process dies) serves on the
  trainer's weights by itself, and the version never goes back.
- A replica reporting another version than the current one is STALE and loads the current
  weights (one load at a time per replica) before a probe may bring it back; none rejoins
  while an update runs. A chunk result carries the version it ran under, and the dispatcher
  keeps no token of a chunk run on other weights than its response's.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from collections.abc import Coroutine, Sequence
from typing import Any, Protocol

from app.api import ReplicaState, WeightsState, WeightsUpdate
from app.config import ServiceConfig
from app.serve.scheduler.jobs import JobError
from app.serve.scheduler.replica_pool import EngineLinks, ReplicaPool
from app.serve.scheduler.speculation import SpeculationControl
from app.weights_digest import DigestMismatch
from core.engine import EngineLoad

log = logging.getLogger("seer.dispatcher")


class DispatchControl(Protocol):
    """What a weight update needs of the dispatch loop."""

    async def quiesce(self, abort_running: bool, timeout_s: float) -> tuple[int, int]:
        """Pause dispatch; abort the chunks in flight when asked; wait at most ``timeout_s``
        for none to be in flight. Returns (chunks aborted, chunks still in flight)."""
        ...

    def restart_partial(self) -> int:
        """Start over every unfinished request holding tokens; returns how many."""
        ...

    def weights_loaded(self, version: int) -> None:
        """New chunks run under policy ``version`` from now on."""
        ...

    def resume(self) -> None:
        """Dispatch again."""
        ...

    async def probe(self, i: int) -> None:
        """One health probe of replica i (it rejoins if it answers on the current weights)."""
        ...

    def spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Future[None]: ...


class WeightUpdater:
    """The service's current weights and the updates to them (see the module invariants)."""

    def __init__(
        self,
        links: EngineLinks,
        pool: ReplicaPool,
        speculation: SpeculationControl,
        config: ServiceConfig,
        control: DispatchControl,
    ) -> None:
        self.links = links
        self.pool = pool
        self.speculation = speculation
        self.config = config
        self.control = control
        self.state = WeightsState(version=0)  # engines start with the configured model

    @property
    def version(self) -> int:
        return self.state.version

    async def update(
        self,
        path: str,
        version: int | None,
        abort_running: bool = False,
        digest: str | None = None,
    ) -> WeightsUpdate:
        """Load new policy weights into every replica between chunks; 409 while another update
        runs or for a version that does not increase, 504 past ``weight_update_timeout_s``,
        503 when no replica loaded them."""
        w = self.state
        if w.updating:
            raise JobError(409, "a weight update is already running")
        new = w.version + 1 if version is None else version
        if new <= w.version:
            raise JobError(
                409, f"version={new} must be above the current policy_version={w.version}"
            )
        t0 = time.time()
        timeout = self.config.weight_update_timeout_s
        deadline = t0 + timeout
        self.state = w.model_copy(update={"updating": True})
        try:
            aborted, running = await self.control.quiesce(abort_running, timeout)
            if running:
                raise JobError(
                    504,
                    f"{running} chunks still running after weight_update_timeout_s={timeout:g}; "
                    "weights unchanged (retry with abort_running)",
                )
            t_drained = time.time()
            restarted = self.control.restart_partial()
            live = self.pool.live()
            outcomes = await asyncio.gather(
                *(
                    asyncio.wait_for(
                        self.links.update_weights(i, path, new, digest),
                        max(deadline - time.time(), 1),
                    )
                    for i in live
                ),
                return_exceptions=True,
            )
            t_loaded = time.time()
            ok, failed, agreed = self._verify(live, outcomes, new, digest, path)
            self.pool.mark_loaded(ok, new)
            await self.speculation.reset_shared()
            self.state = WeightsState(version=new, path=path, digest=agreed, updated_at=t_loaded)
            self.control.weights_loaded(new)
            log.info(
                "policy weights v%d -> v%d from %s (%d restarted)", w.version, new, path, restarted
            )
        finally:
            if self.state.updating:
                self.state = self.state.model_copy(update={"updating": False})
            self.control.resume()
        return WeightsUpdate(
            version=new,
            previous_version=w.version,
            seconds=time.time() - t0,
            drain_seconds=t_drained - t0,
            load_seconds=t_loaded - t_drained,
            restarted_requests=restarted,
            aborted_chunks=aborted,
            replicas=[self.pool[i].replica_id for i in ok],
            failed_replicas=failed,
            digest=self.state.digest or "",
        )

    def _verify(
        self,
        live: list[int],
        outcomes: list[str | BaseException],
        new: int,
        digest: str | None,
        path: str,
    ) -> tuple[list[int], dict[str, str], str]:
        """The replicas that loaded the agreed checkpoint, why each other one did not, and the
        agreed digest. None loaded anything: 422 when the trainer's digest is what no replica
        read (each one's read is named), else 503."""
        ok = [i for i, o in zip(live, outcomes, strict=True) if not isinstance(o, BaseException)]
        failed = {
            self.pool[i].replica_id: repr(o)
            for i, o in zip(live, outcomes, strict=True)
            if isinstance(o, BaseException)
        }
        if not ok:
            seen = {
                self.pool[i].replica_id: m.read
                for i, o in zip(live, outcomes, strict=True)
                if (m := _mismatch(o)) is not None
            }
            if seen:
                raise JobError(
                    422,
                    f"sha256={digest} is not the digest of the checkpoint at {path!r}: the "
                    f"replicas read {seen}; weights unchanged",
                )
            raise JobError(
                503, f"no replica loaded the weights at {path!r}: {failed}; weights unchanged"
            )
        for i in live:
            if i not in ok:
                self.pool.set_state(i, ReplicaState.STALE, f"loading weights v{new} failed")
        read = {i: str(o) for i, o in zip(live, outcomes, strict=True) if i in ok}
        agreed = digest or collections.Counter(read.values()).most_common(1)[0][0]
        for i, d in read.items():
            if d != agreed:  # it runs what no other replica does: never again in rotation
                why = f"loaded weights v{new} with digest {d}, not {agreed} (as the others)"
                failed[self.pool[i].replica_id] = why
                self.pool.set_state(i, ReplicaState.FAILED, why)
        return [i for i in ok if read[i] == agreed], failed, agreed

    def adopt(self, loads: Sequence[EngineLoad]) -> None:
        """What the replicas answered a probe round: before this scheduler updated the weights
        or put any replica in rotation, the newest version among them that names its checkpoint
        becomes the service's (the others then load it: ``out_of_date``)."""
        w = self.state
        if w.path is not None or w.updating:
            return
        if any(rep.state is ReplicaState.HEALTHY for rep in self.pool.replicas):
            return
        known = [
            load
            for load in loads
            if load.policy_checkpoint is not None and load.policy_version > w.version
        ]
        if not known:
            return
        newest = max(known, key=lambda load: load.policy_version)
        checkpoint = newest.policy_checkpoint
        assert checkpoint is not None
        self.state = WeightsState(
            version=newest.policy_version,
            path=checkpoint.path,
            digest=checkpoint.digest,
            updated_at=checkpoint.loaded_at,
        )
        self.control.weights_loaded(newest.policy_version)
        log.warning(
            "adopted policy weights v%d from %s (digest %s), as replica %s reports them: the "
            "scheduler started after that update",
            newest.policy_version,
            checkpoint.path,
            checkpoint.digest[:12],
            newest.replica_id,
        )

    def out_of_date(self, i: int, loaded: int) -> bool:
        """Replica i reports weights ``loaded``: when that is not the current version, it is
        STALE and loads the current weights; True then. While an update runs, a replica out of
        rotation stays out (True): the update loads only the replicas live when it began, and
        one that rejoined now would serve its old weights under the new version; it catches up
        after the update."""
        if self.state.updating:
            return self.pool[i].state is not ReplicaState.HEALTHY
        if loaded == self.state.version:
            return False
        rep = self.pool[i]
        why = f"runs weights v{loaded}, not v{self.state.version}"
        if self.state.path is None:  # nothing to load: the service itself started over
            why += " (weights this scheduler was not told of: POST /v1/weights to load them)"
        if rep.state is ReplicaState.FAILED:
            return True
        if rep.state is ReplicaState.STALE:
            rep.error = why
        else:
            self.pool.set_state(i, ReplicaState.STALE, why)
        if not rep.syncing and self.state.path is not None:
            rep.syncing = True
            self.control.spawn(self._sync(i))
        return True

    async def _sync(self, i: int) -> None:
        rep = self.pool[i]
        path, version = self.state.path, self.state.version
        try:
            assert path is not None
            await asyncio.wait_for(
                self.links.update_weights(i, path, version, self.state.digest),
                self.config.weight_update_timeout_s,
            )
        except Exception as exc:  # noqa: BLE001 - it stays out of rotation; the next probe retries
            rep.error = f"loading weights v{version} failed: {exc!r}"
            log.warning("replica %s: %s", rep.replica_id, rep.error)
        finally:
            rep.syncing = False
        await self.control.probe(i)


def _mismatch(outcome: object) -> DigestMismatch | None:
    """The ``DigestMismatch`` a replica's update raised (Ray hands it over as itself, or as a
    ``RayTaskError`` whose ``cause`` it is), else None."""
    for exc in (outcome, getattr(outcome, "cause", None)):
        if isinstance(exc, DigestMismatch):
            return exc
    return None
