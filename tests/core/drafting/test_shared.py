"""Group texts shared across replicas (``core.drafting.shared``): the draft server's merge rule,
the replica client's outbox and cursors, and two StepDrafters on two "replicas" drafting from
each other's rows through one ``SharedGroups``."""

from __future__ import annotations

from core.drafting.shared import (
    FINISHED,
    GroupCursor,
    SharedGroups,
    SyncBatch,
    SyncClient,
    TokenPush,
    apply_update,
)
from core.drafting.step_drafter import DraftSettings, StepDrafter
from core.drafting.store import DraftStore
from tests.core.drafting.test_step_drafter import PROMPT, Clock, Engine, Row, _target


def push(req: str, offset: int, tokens: list[int], group: str = "g", **kw: bool) -> TokenPush:
    return TokenPush(group_id=group, request_id=req, offset=offset, token_ids=tokens, **kw)


class Clk:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_server_appends_overlapping_runs_once_and_rejects_gaps_and_conflicts() -> None:
    s = SharedGroups()
    assert s.push([push("a", 0, [1, 2, 3])]) == (3, 0)
    assert s.push([push("a", 0, [1, 2, 3])]) == (0, 0)  # the same push again: a no-op
    assert s.push([push("a", 2, [3, 4, 5])]) == (2, 0)  # overlap agrees: only 4, 5 appended
    assert s.push([push("a", 7, [9])]) == (0, 1)  # gap: tokens 5, 6 unknown
    assert s.push([push("a", 1, [2, 9, 9])]) == (0, 1)  # disagrees with the held text
    u = s.update(GroupCursor(group_id="g", version=0))
    assert u is not None and u.version == 2
    # the log's two runs of "a" are contiguous: pulled as one run
    assert [(r.request_id, r.offset, r.token_ids) for r in u.runs] == [("a", 0, [1, 2, 3, 4, 5])]
    assert s.stats().rejected_pushes == 2 and s.stats().tokens == 5


def test_cursor_pulls_only_what_is_new_and_a_cursor_past_the_log_gets_all() -> None:
    s = SharedGroups()
    s.push([push("a", 0, [1, 2]), push("b", 0, [7])])
    u = s.update(GroupCursor(group_id="g", version=0))
    assert u is not None
    s.push([push("a", 2, [3]), push("b", 1, [8, 9])])
    new = s.update(GroupCursor(group_id="g", version=u.version))
    assert new is not None
    assert [(r.request_id, r.offset, r.token_ids) for r in new.runs] == [
        ("a", 2, [3]),
        ("b", 1, [8, 9]),
    ]
    assert s.update(GroupCursor(group_id="g", version=new.version)) is None  # nothing new
    again = s.update(GroupCursor(group_id="g", version=99))  # server restarted or reset
    assert again is not None and sum(len(r.token_ids) for r in again.runs) == 6
    assert s.update(GroupCursor(group_id="other", version=0)) is None


def test_lengths_only_reports_the_lengths_that_changed_and_finished_requests() -> None:
    s = SharedGroups()
    s.push([push("a", 0, [1, 2, 3]), push("b", 0, [4, 5], finished=True)])
    u = s.update(GroupCursor(group_id="g"), lengths_only=True)
    assert u is not None and u.runs == []
    assert u.lengths == {"a": 3, "b": FINISHED}
    s.push([push("a", 3, [4])])
    v = s.update(GroupCursor(group_id="g", version=u.version), lengths_only=True)
    assert v is not None and v.lengths == {"a": 4}  # only what changed
    s.push([push("a", 0, [1, 2, 3, 4], finished=True)])  # no new token, but now finished
    w = s.update(GroupCursor(group_id="g", version=v.version), lengths_only=True)
    assert w is not None and w.lengths == {"a": FINISHED}


def test_released_groups_are_dropped_and_late_pushes_ignored() -> None:
    clk = Clk()
    s = SharedGroups(release_grace_s=30.0, clock=clk)
    s.push([push("a", 0, [1, 2])])
    assert s.release(["g"]) == 1
    clk.now = 5.0
    assert s.push([push("a", 2, [3])]) == (0, 0)  # late: ignored
    assert s.update(GroupCursor(group_id="g")) is None
    assert s.stats().groups == 0 and s.stats().tokens == 0
    clk.now = 40.0  # past the grace: a push starts the group anew (a reused group id)
    assert s.push([push("b", 0, [7, 8])]) == (2, 0)
    assert s.stats().groups == 1


def test_memory_is_bounded_by_tokens_groups_and_ttl() -> None:
    clk = Clk()
    s = SharedGroups(max_tokens=10, max_groups=3, group_ttl_s=100.0, clock=clk)
    for i in range(3):
        s.exchange(SyncBatch(replica_id="r", pushes=[push("a", 0, [1, 2, 3, 4], group=f"g{i}")]))
    # 12 tokens > 10: the least recently pushed group went
    assert s.stats().groups == 2 and s.stats().tokens == 8 and s.stats().evicted_groups == 1
    assert s.update(GroupCursor(group_id="g0")) is None
    clk.now = 50.0
    s.exchange(SyncBatch(replica_id="r", pushes=[push("b", 0, [1], group="g2")]))
    clk.now = 120.0  # g1 idle for 120 s, g2 for 70 s
    s.exchange(SyncBatch(replica_id="r"))
    assert s.update(GroupCursor(group_id="g1")) is None
    assert s.update(GroupCursor(group_id="g2")) is not None
    assert s.reset() == 1 and s.stats().tokens == 0


def test_client_puts_a_failed_exchange_back_and_bounds_its_outbox() -> None:
    c = SyncClient("r0", max_outbox_tokens=6)
    assert c.batch() is None  # nothing to push, nothing watched
    c.push("g", "a", 0, [1, 2])
    c.push("g", "a", 2, [3])  # merged with the run before
    c.watch("g")
    b = c.batch()
    assert b is not None and [p.token_ids for p in b.pushes] == [[1, 2, 3]]
    c.push("g", "b", 0, [7, 8])
    assert c.done(None) == []  # failed: its pushes go back in front
    b2 = c.batch()
    assert b2 is not None and [p.token_ids for p in b2.pushes] == [[1, 2, 3], [7, 8]]
    c.done(None)
    c.push("g", "c", 0, [5, 5, 5])  # 8 tokens > 6: the oldest run is dropped
    assert c.stats.dropped_tokens == 3 and c.stats.failures == 2
    s = SharedGroups()
    b3 = c.batch()
    assert b3 is not None
    updates = c.done(s.exchange(b3))
    assert [u.group_id for u in updates] == ["g"]
    assert c.stats.pushed_tokens == 5
    c.forget(["g"])
    assert c.batch() is None


def test_apply_update_adds_only_what_the_local_index_lacks() -> None:
    server = SharedGroups()
    server.push([push("a", 0, [10, 11, 12, 13]), push("b", 0, [20, 21])])
    store = DraftStore()
    store.register_group("g", PROMPT)
    store.add_tokens("g", "a", [10, 11])  # this replica ran the start of "a" itself
    u = server.update(GroupCursor(group_id="g"))
    assert u is not None
    assert apply_update(store, u) == 4  # a: 12, 13; b: 20, 21
    assert apply_update(store, u) == 0  # applying it twice changes nothing
    g = store.group("g")
    assert g.num_tokens("a") == 4 and g.num_tokens("b") == 2
    other = server.update(GroupCursor(group_id="g"))
    assert other is not None
    store.release_group("g")
    assert apply_update(store, other) == 0  # released here meanwhile: skipped


def _replica(name: str) -> tuple[StepDrafter, Engine]:
    d = StepDrafter(
        max_engine_draft=8,
        clock=Clock(),
        settings=DraftSettings(adaptive=False, min_token_prob=0.0),
        sync=SyncClient(name),
    )
    return d, Engine(d, (0.1, 0.01, 0.001))


def test_a_replica_drafts_from_a_sibling_that_ran_on_another_replica() -> None:
    server = SharedGroups()
    a, eng_a = _replica("r0")
    b, eng_b = _replica("r1")
    target = _target(60, 5)
    eng_a.add(Row("lead-c0", "g", "lead", target))
    for _ in range(30):
        eng_a.step()
    follow = eng_b.add(Row("f-c0", "g", "f", target))
    assert eng_b.step()[0] != target[0:8]  # r1 knows nothing of the sibling on r0 yet

    def exchange(d: StepDrafter) -> None:
        batch = d.sync_step(None)
        assert batch is not None
        d.sync_step(server.exchange(batch))

    exchange(a)  # r0 pushes the 29 tokens of the lead its drafter was fed (the 30th comes
    exchange(b)  # with the next step); r1 pushes its own and pulls the lead's
    assert b.store.group("g").num_tokens("lead") == 29
    pos = len(follow.text) - len(PROMPT)
    assert eng_b.step()[0] == target[pos : pos + 8]  # drafted from the lead's text
    assert b.snapshot().shared_pulled == 29 and a.snapshot().shared_pushed == 29
    # r0's own text came back in its reply but is not added twice
    assert a.store.group("g").num_tokens("lead") == 29
    # released groups stop being watched (and pushed)
    b.release_groups(["g"])
    assert b.sync is not None and b.sync.batch() is None


def test_rewound_requests_alias_apart_on_each_replica() -> None:
    """Two replicas that each rewind the same request name their aliases differently, so the
    draft server holds both texts instead of rejecting one as a conflict."""
    server = SharedGroups()
    texts = {}
    for name in ("r0", "r1"):
        d, eng = _replica(name)
        target = _target(30, 7 if name == "r0" else 8)
        first = eng.add(Row("x-c0", "g", "x", target))
        for _ in range(10):
            eng.step()
        del eng.rows[first.row_id]
        eng.add(Row("x-c1", "g", "x", target, text=list(PROMPT) + target[:3]))
        for _ in range(3):
            eng.step()
        batch = d.sync_step(None)
        assert batch is not None
        server.exchange(batch)
        texts[name] = {p.request_id for p in batch.pushes}
    aliases = [k for ks in texts.values() for k in ks if k != "x"]
    assert len(aliases) == 2 and len(set(aliases)) == 2
    assert server.stats().rejected_pushes == 1  # only the two replicas' texts of "x" clash
