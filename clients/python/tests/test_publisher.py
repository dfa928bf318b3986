import asyncio
import secrets
import threading
import time
import urllib.request

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


def _stored(http_url, thread, n):
    for _ in range(400):
        events = HistoryClient(http_url).list_events(thread, limit=100)["events"]
        if len(events) >= n:
            return events
        time.sleep(0.05)
    return events


def test_a_refused_event_fails_alone_and_its_batch_mates_are_stored(grpc_target, http_url, thread):
    """Two bad events among five handed over together: those two fail with their own field named,
    the other three are stored in order (once, the whole batch failed with the first refusal)."""

    def check(results, t):
        assert [r.event_id if not isinstance(r, Exception) else r.message.split(":")[0] for r in results] == [
            "e1",
            "content_json",
            "e3",
            "event_type",
            "e5",
        ]
        assert all(r.code == "invalid_argument" for r in results if isinstance(r, Exception))
        assert [(e["event_id"], e["seq"]) for e in _stored(http_url, t, 3)] == [("e1", 1), ("e3", 2), ("e5", 3)]

    def batch(t):
        return [
            chunk(t, 1),
            Event(t, "run-1", "ai_chunk", "message", content_json="{nope", event_id="e2"),
            chunk(t, 3),
            chunk(t, 4, event_type="bad type"),
            chunk(t, 5),
        ]

    # Sync: the linger keeps the five in one request.
    with Publisher(grpc_target, linger_ms=300) as pub:
        futures = [pub.publish(e) for e in batch(thread)]
        check([f.exception(30) or f.result() for f in futures], thread)

    async def main():
        async with AsyncPublisher(grpc_target) as pub:
            futures = [await pub.enqueue(e) for e in batch(f"{thread}-a")]  # queued before the worker runs
            return await asyncio.gather(*futures, return_exceptions=True)

    check(asyncio.run(main()), f"{thread}-a")


def test_an_event_no_request_can_carry_is_refused_and_never_retried(grpc_target, http_url, thread):
    huge = '"' + "x" * (17 * 1024 * 1024) + '"'  # over the broker's 16 MiB requests
    retries: list = []

    def on_retry(err, attempt, delay):
        retries.append(err.code)

    with Publisher(grpc_target, on_retry=on_retry) as pub:
        with pytest.raises(RunstreamError) as err:
            pub.publish(Event(thread, "run-1", "ai_chunk", "message", content_json=huge))
        assert err.value.code == "invalid_argument" and err.value.message.startswith("content_json: ")
    # Told the broker takes more than it does: its gRPC refuses the request as too large, once.
    with Publisher(grpc_target, on_retry=on_retry, max_request_bytes=64 << 20, max_attempts=3, initial_delay_s=0.001) as pub:
        with pytest.raises(RunstreamError) as err:
            pub.publish(Event(thread, "run-1", "ai_chunk", "message", content_json=huge)).result(60)
        assert err.value.code == "resource_exhausted" and "larger than max" in err.value.message

    async def main():
        async with AsyncPublisher(
            grpc_target, on_retry=on_retry, max_request_bytes=64 << 20, max_attempts=3, initial_delay_s=0.001
        ) as pub:
            with pytest.raises(RunstreamError) as err:
                await pub.publish_batch([Event(thread, "run-1", "ai_chunk", "message", content_json=huge)])
            assert err.value.code == "resource_exhausted"
            return await pub.publish(chunk(thread, 1))

    assert asyncio.run(main()).event_id == "e1"
    assert retries == []
    assert [e["event_id"] for e in _stored(http_url, thread, 1)] == ["e1"]


def test_async_close_waits_for_a_publish_batch_in_flight(grpc_target, http_url, thread):
    """close() used to close the channel under a publish_batch() in flight: its caller got
    CancelledError although the batch was stored."""

    async def main():
        pub = AsyncPublisher(grpc_target, ack="PERSISTED")
        batch = asyncio.create_task(pub.publish_batch([chunk(thread, i) for i in range(1, 501)]))
        await asyncio.sleep(0)  # the request is out
        await pub.close()
        return await batch

    acks = asyncio.run(main())
    assert [a.seq for a in acks] == list(range(1, 501))


def test_a_caller_that_stops_waiting_does_not_stop_the_publisher(grpc_target, thread):
    """A publish() whose caller was cancelled left a cancelled future that the worker then tried
    to answer: InvalidStateError ended the worker, and every later publish() waited forever."""

    async def main():
        pub = AsyncPublisher(grpc_target, linger_ms=50)
        try:
            waiting = asyncio.create_task(pub.publish(chunk(thread, 1)))
            await asyncio.sleep(0.01)  # queued, lingering
            waiting.cancel()
            return await asyncio.wait_for(pub.publish(chunk(thread, 2)), 30)
        finally:
            await asyncio.wait_for(pub.close(), 30)

    assert asyncio.run(main()).event_id == "e2"
    with Publisher(grpc_target, linger_ms=50) as pub:
        first = pub.publish(chunk(f"{thread}-s", 1))
        first.cancel()
        assert pub.publish(chunk(f"{thread}-s", 2)).result(30).event_id == "e2"


def _requests(http_url, outcome):
    """The broker's count of ACCEPTED publish requests answered with ``outcome``."""
    key = f'runstream_ingest_requests_total{{ack="ACCEPTED",outcome="{outcome}"}} '
    with urllib.request.urlopen(f"{http_url}/metrics", timeout=10) as res:
        lines = res.read().decode().splitlines()
    return next((float(line[len(key) :]) for line in lines if line.startswith(key)), 0.0)


def test_a_refusal_about_a_run_fails_all_its_events_at_once_and_a_lone_event_hears_its_field(grpc_target, http_url, thread):
    """Three of six events handed over together are for a run_id the broker refuses: one refusal
    answers all three (it used to take one request per event), the other three are stored."""
    runs = ["run-1", "bad run", "run-1", "bad run", "bad run", "run-1"]
    refused, ok = _requests(http_url, "invalid_argument"), _requests(http_url, "ok")
    with Publisher(grpc_target, linger_ms=300) as pub:
        futures = [pub.publish(chunk(thread, i, run_id=r)) for i, r in enumerate(runs, 1)]
        results = [f.exception(30) or f.result() for f in futures]
        assert [r.event_id if not isinstance(r, Exception) else r.message.split(":")[0] for r in results] == [
            "e1", "run_id", "e3", "run_id", "run_id", "e6"
        ]
        assert _requests(http_url, "invalid_argument") - refused == 1
        assert _requests(http_url, "ok") - ok == 1
        # Alone in its request, a refused event hears the same words.
        with pytest.raises(RunstreamError) as err:
            pub.publish(chunk(thread, 7, event_type="bad type")).result(30)
        assert err.value.message.startswith("event_type: ")
    assert [(e["event_id"], e["seq"]) for e in _stored(http_url, thread, 3)] == [("e1", 1), ("e3", 2), ("e6", 3)]


def test_requests_never_exceed_max_request_bytes(grpc_target, http_url, thread):
    """Six events of 200 KB handed over together, with requests of at most 1 MiB: two requests
    (five, then one), where one request of 1.2 MB would be refused by a broker of that limit."""
    big = '"' + "x" * 200_000 + '"'
    ok = _requests(http_url, "ok")
    with Publisher(grpc_target, linger_ms=300, max_request_bytes=1 << 20) as pub:
        futures = [pub.publish(Event(thread, "run-1", "ai_chunk", "message", content_json=big, event_id=f"e{i}")) for i in range(1, 7)]
        assert [f.result(30).seq for f in futures] == [0] * 6  # ACCEPTED
        assert _requests(http_url, "ok") - ok == 2
        with pytest.raises(RunstreamError) as err:
            pub.publish_batch([Event(thread, "run-1", "ai_chunk", "message", content_json=big)] * 6)
        assert err.value.code == "invalid_argument" and err.value.message.startswith("events: ")

    async def main():
        async with AsyncPublisher(grpc_target, linger_ms=300, max_request_bytes=1 << 20) as pub:
            before = _requests(http_url, "ok")
            futures = [await pub.enqueue(Event(f"{thread}-a", "run-1", "ai_chunk", "message", content_json=big)) for _ in range(6)]
            await asyncio.gather(*futures)
            return _requests(http_url, "ok") - before

    assert asyncio.run(main()) == 2
    assert len(_stored(http_url, thread, 6)) == 6


def test_an_async_stream_outlives_a_caller_that_stops_waiting(grpc_target, http_url, thread):
    """Cancelling a send() cancelled the whole call (grpc.aio does so when a write is cancelled),
    or left its future to be answered later, which ended the reader: every later send() waited
    forever. The cancelled request is still sent."""

    async def main():
        async with AsyncPublisher(grpc_target) as pub:
            stream = pub.open_stream()
            try:
                waiting = asyncio.create_task(stream.send([chunk(thread, 1)]))
                await asyncio.sleep(0)
                waiting.cancel()
                acks = await asyncio.wait_for(stream.send([chunk(thread, 2)]), 30)
            finally:
                await asyncio.wait_for(stream.close(), 30)
            ended = pub.open_stream()
            ended.cancel()
            with pytest.raises(RunstreamError) as err:  # at once, not never
                await asyncio.wait_for(ended.send([chunk(thread, 3)]), 30)
            assert err.value.code == "cancelled"
            return acks

    assert [a.event_id for a in asyncio.run(main())] == ["e2"]
    assert [e["event_id"] for e in _stored(http_url, thread, 2)] == ["e1", "e2"]


def test_a_sync_stream_that_ended_fails_later_sends_at_once(grpc_target, thread):
    with Publisher(grpc_target) as pub:
        stream = pub.open_stream()
        assert [a.event_id for a in stream.send([chunk(thread, 1)], timeout=30)] == ["e1"]
        stream.cancel()
        stream._reader.join(30)
        with pytest.raises(RunstreamError) as err:
            stream.send([chunk(thread, 2)], timeout=30)
        assert err.value.code == "cancelled"


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_stream_whose_on_cancel_raises_answers_its_sends(grpc_target, http_url, thread):
    """An on_cancel that raised ended the sync stream's reader without answering anyone: every
    later send() waited forever."""
    with Publisher(grpc_target, ack="PERSISTED") as pub:
        called = threading.Event()

        def on_cancel(c):
            called.set()
            raise RuntimeError("the caller's bug")

        stream = pub.open_stream(on_cancel=on_cancel)
        stream.send([Event(thread, "run-x", "run_start", "lifecycle", {}, event_id="x1")], timeout=30)
        HistoryClient(http_url).cancel_run(thread, "run-x")
        assert called.wait(60)
        stream._reader.join(30)
        with pytest.raises(RunstreamError):
            stream.send([chunk(thread, 2)], timeout=30)
        stream.cancel()


def test_an_async_stream_cancelled_before_it_connected_closes(thread):
    """cancel() before the call had sent its headers left the writer waiting for them forever,
    and close() with it."""

    async def main():
        import socket

        with socket.socket() as silent:  # takes connections and never speaks: the call stays connecting
            silent.bind(("127.0.0.1", 0))
            silent.listen(8)
            pub = AsyncPublisher(f"127.0.0.1:{silent.getsockname()[1]}")
            stream = pub.open_stream()
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(stream.send([chunk(thread, 1)])), 0.5)
            stream.cancel()
            await asyncio.wait_for(stream.close(), 10)
            await asyncio.wait_for(pub.close(), 10)

    asyncio.run(main())


def test_a_refusal_by_value_fails_every_event_of_that_value_in_one_answer(grpc_target, http_url, thread):
    """A user-scoped field left out, a bad event type shared by many events: one refusal answers
    all of them (it used to take one request per event, each resending the rest)."""
    refused, ok = _requests(http_url, "invalid_argument"), _requests(http_url, "ok")
    with Publisher(grpc_target, linger_ms=300) as pub:
        types = ["ai_chunk", "bad type", "ai_chunk", "bad type", "bad type", "ai_chunk"]
        futures = [pub.publish(chunk(thread, i, event_type=t)) for i, t in enumerate(types, 1)]
        results = [f.exception(30) or f.result() for f in futures]
    assert [isinstance(r, Exception) for r in results] == [t == "bad type" for t in types]
    assert _requests(http_url, "invalid_argument") - refused == 1
    assert _requests(http_url, "ok") - ok == 1
