"""RunstreamEventStore behaves as DeerFlow's own stores: signatures, paging, records."""

import asyncio
import inspect
from datetime import datetime

import pytest

from runstream.deerflow import RunstreamEventStore

# DeerFlow's RunEventStore (runtime/events/store/base.py): every method and its parameters.
DEERFLOW_METHODS = {
    "put": ["self", "thread_id", "run_id", "event_type", "category", "content", "metadata", "created_at"],
    "put_batch": ["self", "events"],
    "put_if_absent": ["self", "thread_id", "run_id", "event_type", "category", "content", "metadata", "created_at"],
    "list_messages": ["self", "thread_id", "limit", "before_seq", "after_seq", "user_id"],
    "list_events": ["self", "thread_id", "run_id", "event_types", "task_id", "limit", "after_seq"],
    "list_messages_by_run": ["self", "thread_id", "run_id", "limit", "before_seq", "after_seq"],
    "get_last_visible_ai_seq_by_run": ["self", "thread_id", "run_ids", "user_id"],
    "find_latest_ai_message_run_ids": ["self", "thread_id", "message_ids", "user_id"],
    "count_messages": ["self", "thread_id"],
    "delete_by_thread": ["self", "thread_id"],
    "delete_by_run": ["self", "thread_id", "run_id"],
}


def test_every_method_of_deerflows_interface_with_its_defaults():
    for name, params in DEERFLOW_METHODS.items():
        fn = getattr(RunstreamEventStore, name)
        assert inspect.iscoroutinefunction(fn), name
        got = list(inspect.signature(fn).parameters)
        assert got[: len(params)] == params, (name, got)
    sig = inspect.signature(RunstreamEventStore.list_messages).parameters
    assert sig["limit"].default == 50
    assert inspect.signature(RunstreamEventStore.list_events).parameters["limit"].default == 500
    assert inspect.signature(RunstreamEventStore.list_messages_by_run).parameters["limit"].default == 50
    init = list(inspect.signature(RunstreamEventStore.__init__).parameters)
    assert init == ["self", "grpc_target", "http_url", "token"]


@pytest.fixture
def store(grpc_target, http_url):
    return RunstreamEventStore(grpc_target=grpc_target, http_url=http_url)


def run(coro):
    return asyncio.run(coro)


def test_put_returns_the_record_with_its_seq_and_reads_give_back_what_was_put(store, thread):
    async def main():
        created = "2026-06-04T10:00:00.123000+00:00"
        rec = await store.put(
            thread_id=thread,
            run_id="r1",
            event_type="human_message",
            category="message",
            content={"content": "你好"},
            metadata={"id": "h1", "nested": {"a": [1, 2]}},
            created_at=created,
        )
        assert rec == {
            "thread_id": thread,
            "run_id": "r1",
            "event_type": "human_message",
            "category": "message",
            "content": {"content": "你好"},
            "metadata": {"id": "h1", "nested": {"a": [1, 2]}},
            "seq": 1,
            "created_at": created,
        }
        plain = await store.put(thread_id=thread, run_id="r1", event_type="note", category="trace", content="just text")
        assert plain["seq"] == 2 and plain["content"] == "just text" and plain["metadata"] == {}
        [read] = await store.list_messages(thread)
        assert read == rec
        [note] = await store.list_events(thread, "r1", event_types=["note"])
        assert note["content"] == "just text"
        # Kept at millisecond precision: what a caller gave at that precision comes back equal.
        delta = datetime.fromisoformat(note["created_at"]) - datetime.fromisoformat(plain["created_at"])
        assert abs(delta.total_seconds()) < 0.001
        await store.close()

    run(main())


def test_paging_matches_deerflows_stores(store, thread):
    async def main():
        batch = []
        for i in range(1, 41):
            # Messages on odd seqs, traces on even ones; two runs.
            category = "message" if i % 2 else "trace"
            batch.append(
                {
                    "thread_id": thread,
                    "run_id": "ra" if i <= 20 else "rb",
                    "event_type": "ai_chunk" if category == "message" else "llm_start",
                    "category": category,
                    "content": {"i": i},
                    "metadata": {"task_id": "t1" if i % 4 == 1 else "t2"},
                }
            )
        recs = await store.put_batch(batch)
        assert [r["seq"] for r in recs] == list(range(1, 41))
        msgs = [i for i in range(1, 41) if i % 2]
        seqs = lambda rs: [r["seq"] for r in rs]  # noqa: E731

        assert seqs(await store.list_messages(thread)) == msgs  # fewer than the default 50
        assert seqs(await store.list_messages(thread, limit=5)) == msgs[-5:]  # the latest, ascending
        assert seqs(await store.list_messages(thread, limit=3, before_seq=11)) == [5, 7, 9]
        assert seqs(await store.list_messages(thread, limit=3, after_seq=11)) == [13, 15, 17]
        assert seqs(await store.list_messages(thread, limit=10, after_seq=30, before_seq=35)) == [31, 33]
        assert seqs(await store.list_messages(thread, limit=3, before_seq=1)) == []
        assert seqs(await store.list_messages_by_run(thread, "rb")) == [i for i in msgs if i > 20]
        assert seqs(await store.list_messages_by_run(thread, "rb", limit=2)) == [37, 39]
        assert seqs(await store.list_messages_by_run(thread, "rb", limit=2, before_seq=25)) == [21, 23]
        assert seqs(await store.list_messages_by_run(thread, "ra", limit=2, after_seq=5)) == [7, 9]

        assert seqs(await store.list_events(thread, "ra")) == list(range(1, 21))
        assert seqs(await store.list_events(thread, "ra", limit=3)) == [1, 2, 3]  # the first `limit`
        assert seqs(await store.list_events(thread, "rb", after_seq=35)) == [36, 37, 38, 39, 40]
        assert seqs(await store.list_events(thread, "ra", event_types=["llm_start"], limit=2)) == [2, 4]
        assert seqs(await store.list_events(thread, "ra", task_id="t1")) == [1, 5, 9, 13, 17]
        assert seqs(await store.list_events(thread, "ra", task_id="t1", after_seq=5, limit=2)) == [9, 13]
        assert await store.count_messages(thread) == 20
        await store.close()

    run(main())


def test_put_if_absent_last_visible_ai_seq_and_deletes(store, thread):
    async def main():
        first, created = await store.put_if_absent(
            thread_id=thread, run_id="r1", event_type="run.receipt", category="lifecycle", content={"n": 1}
        )
        assert created and first["seq"] == 1
        again, created2 = await store.put_if_absent(
            thread_id=thread, run_id="r1", event_type="run.receipt", category="lifecycle", content={"n": 2}
        )
        assert not created2 and again["seq"] == 1 and again["content"] == {"n": 1}
        other, created3 = await store.put_if_absent(
            thread_id=thread, run_id="r2", event_type="run.receipt", category="lifecycle", content={}
        )
        assert created3 and other["seq"] == 2

        ai = lambda run, caller=None, mid="m": {  # noqa: E731
            "thread_id": thread,
            "run_id": run,
            "event_type": "llm.ai.response",
            "category": "message",
            "content": {"type": "ai", "id": mid, "content": "x"},
            "metadata": {} if caller is None else {"caller": caller},
        }
        await store.put_batch([ai("r1", mid="m1"), ai("r1", "middleware:summary"), ai("r2", mid="m2"), ai("r1", mid="m3")])
        # seqs: 3 (r1), 4 (r1, middleware), 5 (r2), 6 (r1)
        assert await store.get_last_visible_ai_seq_by_run(thread, {"r1", "r2", "r3"}) == {"r1": 6, "r2": 5}
        assert await store.find_latest_ai_message_run_ids(thread, {"m1", "m2", "nope"}) == {"m1": "r1", "m2": "r2"}
        assert await store.find_latest_ai_message_run_ids(thread, set()) == {}

        assert await store.delete_by_run(thread, "r2") == 2
        assert [r["seq"] for r in await store.list_messages(thread)] == [3, 4, 6]
        assert await store.delete_by_thread(thread) == 4
        assert await store.list_messages(thread) == []
        assert await store.count_messages(thread) == 0
        await store.close()

    run(main())
