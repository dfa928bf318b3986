import asyncio
import secrets
import threading
import time

import pytest

from runstream import AsyncPublisher, Event, HistoryClient, Publisher, RunstreamError


def chunk(thread, i, **kw):
    return Event(thread, kw.pop("run_id", "run-1"), kw.pop("event_type", "ai_chunk"), kw.pop("category", "message"), {"i": i}, event_id=f"e{i}", **kw)


def test_sync_publisher_persisted_acks_and_retries_are_stored_once(grpc_target, http_url, thread):
    with Publisher(grpc_target, ack="PERSISTED", max_batch_events=5) as pub:
        acks = pub.publish_many([chunk(thread, i) for i in range(1, 21)])
        assert [(a.event_id, a.seq, a.duplicate) for a in acks] == [(f"e{i}", i, False) for i in range(1, 21)]
        # No request held more than max_batch_events: events of one request share an offset.
        assert len({a.offset for a in acks}) >= 4
        again = pub.publish_many([chunk(thread, i) for i in range(1, 21)])
        assert all(a.duplicate and a.seq == i for i, a in enumerate(again, 1))
    page = HistoryClient(http_url).list_events(thread, limit=100)
    assert [e["seq"] for e in page["events"]] == list(range(1, 21))


def test_generated_ids_are_fixed_before_the_first_send(grpc_target, thread):
    with Publisher(grpc_target, ack="PERSISTED", id_prefix="gen") as pub:
        events = [Event(thread, "run-1", "ai_chunk", "message", {"i": i}) for i in range(3)]
        first = pub.publish_batch(events)
        assert [a.event_id for a in first] == ["gen-1", "gen-2", "gen-3"]
        # The same Event objects again (as a retry would send them): the same ids, duplicates.
        second = pub.publish_batch(events)
        assert [(a.event_id, a.duplicate, a.seq) for a in second] == [("gen-1", True, 1), ("gen-2", True, 2), ("gen-3", True, 3)]


def test_a_refusal_names_the_field_and_stores_nothing(grpc_target, http_url, thread):
    with Publisher(grpc_target) as pub:
        with pytest.raises(RunstreamError) as err:
            pub.publish(Event(thread, "run-1", "ai_chunk", "message", content_json="{nope")).result()
        assert err.value.code == "invalid_argument"
        assert "content_json" in err.value.message
        # Any lower-case identifier is a category; anything else is refused by the broker.
        with pytest.raises(RunstreamError) as err:
            pub.publish(Event(thread, "run-1", "ai_chunk", "Chat!", {})).result()
        assert err.value.code == "invalid_argument"
        assert "category_name" in err.value.message
    assert HistoryClient(http_url).list_events(thread)["events"] == []


def test_async_publisher_and_stream_with_cancel_controls(grpc_target, http_url, thread):
    async def main():
        async with AsyncPublisher(grpc_target, ack="PERSISTED") as pub:
            acks = await pub.publish_many([chunk(thread, i) for i in range(1, 11)])
            assert [a.seq for a in acks] == list(range(1, 11))
            cancelled = asyncio.Event()
            stream = pub.open_stream(on_cancel=lambda c: cancelled.set())
            [start] = await stream.send([Event(thread, "run-s", "run_start", "lifecycle", {}, event_id="s1")])
            assert start.seq == 11
            await asyncio.to_thread(HistoryClient(http_url).cancel_run, thread, "run-s", "stop please")
            await asyncio.wait_for(cancelled.wait(), 60)
            assert [c.reason for c in stream.cancels] == ["stop please"]
            # Acks still match their requests around the control message.
            [end] = await stream.send(
                [Event(thread, "run-s", "run_end", "lifecycle", {"status": "cancelled"}, event_id="s2")]
            )
            assert end.seq == 13
            await stream.close()
        assert HistoryClient(http_url).get_run(thread, "run-s")["status"] == "cancelled"

    asyncio.run(main())


def test_async_publisher_without_linger_sends_what_waits_as_one_request(grpc_target, http_url, thread):
    """linger_ms=0: no timer; the events waiting when the worker runs go together (one log message)."""

    async def main():
        async with AsyncPublisher(grpc_target, linger_ms=0) as pub:
            # Queued before the worker runs: they wait together.
            acks = await pub.publish_many([chunk(thread, i) for i in range(1, 11)])
            assert [a.seq for a in acks] == [0] * 10
            assert len({a.offset for a in acks}) == 1, [a.offset for a in acks]
            one = await pub.publish(chunk(thread, 11))
            assert one.event_id == "e11"

    asyncio.run(main())
    # ACCEPTED acks: the events are stored a moment later, in order.
    for _ in range(200):
        events = HistoryClient(http_url).list_events(thread, limit=100)["events"]
        if len(events) == 11:
            break
        time.sleep(0.05)
    assert [e["event_id"] for e in events] == [f"e{i}" for i in range(1, 12)]


def test_async_publisher_refuses_events_once_closing_and_never_reopens(grpc_target, thread):
    """An event handed over while close() runs, or after it, is refused with `closed` (it once
    went to a worker close() then cancelled, and its caller waited forever; after close it
    silently reopened the channel)."""

    async def main():
        pub = AsyncPublisher(grpc_target)
        first = await pub.publish(chunk(thread, 1))
        assert first.event_id == "e1"
        closing = asyncio.create_task(pub.close())
        await asyncio.sleep(0)  # close() has begun: its flush is waiting for the worker
        with pytest.raises(RunstreamError) as err:
            await asyncio.wait_for(pub.publish(chunk(thread, 2)), 10)
        assert err.value.code == "closed"
        await asyncio.wait_for(closing, 10)
        with pytest.raises(RunstreamError) as err:
            await asyncio.wait_for(pub.publish(chunk(thread, 3)), 10)
        assert err.value.code == "closed"
        await pub.close()  # again: nothing to do

    asyncio.run(main())


def test_sync_publisher_close_races_publishers_and_flush_and_settles_everything(grpc_target):
    """close() while threads publish into a full queue: every event either refused with `closed`
    or answered, no thread left blocked; a second close() and a flush() after close return."""
    for trial in range(10):
        pub = Publisher(grpc_target, max_queued=2)
        futures: list = []
        lock = threading.Lock()

        def produce(i: int) -> None:
            for j in range(50):
                try:
                    f = pub.publish(chunk(f"pyc-{secrets.token_hex(3)}-{i}", j))
                except RunstreamError as err:
                    assert err.code == "closed"
                    return
                with lock:
                    futures.append(f)

        producers = [threading.Thread(target=produce, args=(i,), daemon=True) for i in range(8)]
        for t in producers:
            t.start()
        closers = [threading.Thread(target=pub.close, daemon=True) for _ in range(2)]
        for t in closers:
            t.start()
        for t in [*closers, *producers]:
            t.join(30)
            assert not t.is_alive(), f"trial {trial}: a thread is stuck"
        assert all(f.done() for f in futures), f"trial {trial}: unanswered events"
        flusher = threading.Thread(target=pub.flush, daemon=True)
        flusher.start()
        flusher.join(30)
        assert not flusher.is_alive(), "flush() after close() hung"


def test_async_publisher_second_close_waits_for_the_first(grpc_target, thread):
    async def main():
        pub = AsyncPublisher(grpc_target)
        futures = [await pub.enqueue(chunk(thread, i)) for i in range(1, 51)]
        first = asyncio.create_task(pub.close())
        await asyncio.sleep(0)  # the first close has begun
        await asyncio.wait_for(pub.close(), 30)
        assert all(f.done() for f in futures), "the second close() returned before the events were answered"
        await first

    asyncio.run(main())


def test_sync_stream_hands_back_cancels(grpc_target, http_url, thread):
    import threading

    got = threading.Event()
    with Publisher(grpc_target, ack="PERSISTED") as pub:
        stream = pub.open_stream(on_cancel=lambda c: got.set())
        [a] = stream.send([Event(thread, "run-x", "run_start", "lifecycle", {}, event_id="x1")])
        assert a.seq == 1
        HistoryClient(http_url).cancel_run(thread, "run-x")
        assert got.wait(60)
        [b] = stream.send([Event(thread, "run-x", "run_end", "lifecycle", {"status": "cancelled"}, event_id="x2")])
        assert b.seq == 3
        stream.close()
