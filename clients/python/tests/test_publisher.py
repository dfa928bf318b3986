import asyncio
import secrets
import threading
import time
import urllib.request

import grpc
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


def test_an_event_object_published_again_is_a_new_event(grpc_target, http_url, thread):
    """One Event object reused for each token, only its content changed: every publish is a new
    event. The generated id was written into the caller's object, so the second and third went
    with the first one's id and were dropped as its duplicates (their content lost)."""
    tokens = ["Hello", " world", "!"]

    def reuse(publish, t):
        ev = Event(t, "run-1", "ai_chunk", "message")
        acks = []
        for tok in tokens:
            ev.content = tok
            acks.append(publish(ev))
        assert [a.duplicate for a in acks] == [False] * 3
        assert len({a.event_id for a in acks}) == 3
        assert [e["content"] for e in _stored(http_url, t, 3)] == tokens
        assert ev.event_id == "", "the caller's event was changed"

    with Publisher(grpc_target, ack="PERSISTED") as pub:
        reuse(lambda e: pub.publish(e).result(30), thread)
        reuse(lambda e: pub.publish_batch([e])[0], f"{thread}-b")
        stream = pub.open_stream()
        reuse(lambda e: stream.send([e], timeout=30)[0], f"{thread}-s")
        stream.close()

    async def main():
        async with AsyncPublisher(grpc_target, ack="PERSISTED") as pub:
            ev = Event(f"{thread}-a", "run-1", "ai_chunk", "message")
            acks = []
            for tok in tokens:
                ev.content = tok
                acks.append(await pub.publish(ev))
            ev.content = "?"
            acks.append((await pub.publish_batch([ev]))[0])
            stream = pub.open_stream()
            ev.content = "."
            acks.append((await stream.send([ev]))[0])
            await stream.close()
            assert ev.event_id == ""
            return acks

    acks = asyncio.run(main())
    assert [a.duplicate for a in acks] == [False] * 5
    assert [e["content"] for e in _stored(http_url, f"{thread}-a", 5)] == [*tokens, "?", "."]


class _AnswerLost:
    """A relay to the broker that loses the answer of every other Publish (the first, the third,
    …): the broker stores the request, the client hears UNAVAILABLE and sends it again."""

    def __init__(self, target: str):
        from concurrent.futures import ThreadPoolExecutor

        import grpc

        self._grpc = grpc
        self._upstream = grpc.insecure_channel(target, options=[("grpc.enable_http_proxy", 0)])
        self._forward = self._upstream.unary_unary("/runstream.v1.Ingest/Publish")  # bytes as they are
        self.requests: list = []
        self._server = grpc.server(ThreadPoolExecutor(4))
        handler = grpc.method_handlers_generic_handler(
            "runstream.v1.Ingest", {"Publish": grpc.unary_unary_rpc_method_handler(self._publish)}
        )
        self._server.add_generic_rpc_handlers((handler,))
        self.target = f"127.0.0.1:{self._server.add_insecure_port('127.0.0.1:0')}"
        self._server.start()

    def _publish(self, raw: bytes, context):
        from runstream.v1 import runstream_pb2 as pb

        self.requests.append([e.event_id for e in pb.PublishRequest.FromString(raw).events])
        answer = self._forward(raw, timeout=30)
        if len(self.requests) % 2 == 1:
            context.abort(self._grpc.StatusCode.UNAVAILABLE, "the answer was lost")
        return answer

    def close(self) -> None:
        self._server.stop(None)
        self._upstream.close()


def test_a_retry_resends_the_generated_ids_and_is_stored_once(grpc_target, http_url, thread):
    """An id the publisher makes up is fixed when the event is handed over: the answer to the
    first request lost, the retry carries the same ids, and the events are stored once."""
    relay = _AnswerLost(grpc_target)
    retries: list = []
    try:
        with Publisher(
            relay.target, ack="PERSISTED", id_prefix="gen", initial_delay_s=0.001, on_retry=lambda *a: retries.append(a[1])
        ) as pub:
            ev = Event(thread, "run-1", "ai_chunk", "message", {"i": 1})
            one = pub.publish(ev).result(30)
            batch = pub.publish_batch([Event(thread, "run-1", "ai_chunk", "message", {"i": i}) for i in (2, 3)])
    finally:
        relay.close()
    assert retries == [1, 1]
    assert relay.requests == [["gen-1"], ["gen-1"], ["gen-2", "gen-3"], ["gen-2", "gen-3"]]
    assert [(a.event_id, a.duplicate, a.seq) for a in [one, *batch]] == [
        ("gen-1", True, 1), ("gen-2", True, 2), ("gen-3", True, 3)
    ]
    assert [(e["event_id"], e["seq"]) for e in _stored(http_url, thread, 3)] == [("gen-1", 1), ("gen-2", 2), ("gen-3", 3)]
    assert ev.event_id == ""


def _no_answer(err, ids):
    """A stream request left without an answer by another request's refusal: retryable, and it
    carries its ids for the resend."""
    return (
        isinstance(err, RunstreamError)
        and err.code == "unavailable"
        and "may have been stored" in err.message
        and err.event_ids == ids
    )


def _stream_event(t, i):
    if i == 2:
        return Event(t, "run-1", "ai_chunk", "message", content_json="{nope")
    return Event(t, "run-1", "ai_chunk", "message", {"i": i})


def test_a_stream_refusal_fails_that_request_and_those_behind_it_may_be_resent(grpc_target, http_url, thread):
    """Request 2 of five pipelined on a stream is refused: it fails with the refusal, and 3 and 4,
    which the broker may have stored, fail as retryable with their ids (they failed with request
    2's invalid_argument, and a caller dropping them as refused lost them). Sent again with those
    ids on a new stream, every event is stored once."""
    from dataclasses import replace

    ev = _stream_event

    async def main():
        async with AsyncPublisher(grpc_target, ack="PERSISTED", id_prefix="as") as pub:
            stream = pub.open_stream()
            events = [ev(thread, i) for i in range(5)]
            results = await asyncio.gather(*(stream.send([e]) for e in events), return_exceptions=True)
            assert [a.event_id for [a] in results[:2]] == ["as-1", "as-2"]
            assert results[2].code == "invalid_argument" and "content_json" in results[2].message
            assert _no_answer(results[3], ["as-4"]) and _no_answer(results[4], ["as-5"]), results[3:]
            with pytest.raises(RunstreamError) as err:  # not sent: the stream has ended
                await stream.send([ev(thread, 5)])
            assert err.value.code == "closed"
            again = pub.open_stream()
            for i in (3, 4):
                await again.send([replace(events[i], event_id=results[i].event_ids[0])])
            await again.close()

    asyncio.run(main())
    assert [(e["event_id"], e["content"]) for e in _stored(http_url, thread, 4)] == [
        ("as-1", {"i": 0}), ("as-2", {"i": 1}), ("as-4", {"i": 3}), ("as-5", {"i": 4})
    ]


def test_a_sync_stream_refusal_fails_that_request_alone(grpc_target, http_url, thread):
    """The sync stream, as above: the refused request first, then two more from other threads,
    which the refusal may overtake (then they were never sent, and fail with `closed`). Neither
    fails with the refusal."""
    from dataclasses import replace

    ev = _stream_event
    t = thread
    with Publisher(grpc_target, ack="PERSISTED", id_prefix="ss") as pub:
        stream = pub.open_stream()
        results: dict = {}

        def send(i):
            try:
                results[i] = stream.send([ev(t, i)], timeout=30)
            except RunstreamError as err:
                results[i] = err

        first = threading.Thread(target=send, args=(2,))
        first.start()
        while not stream._waiting and first.is_alive():  # the refused request is queued
            time.sleep(0.0005)
        rest = [threading.Thread(target=send, args=(i,)) for i in (3, 4)]
        for th in rest:
            th.start()
        for th in [first, *rest]:
            th.join(30)
        assert results[2].code == "invalid_argument" and "content_json" in results[2].message
        for i in (3, 4):
            err = results[i]
            assert err.code in ("closed", "unavailable"), err
            if err.code == "closed":  # never sent
                pub.publish_batch([ev(t, i)])
            else:
                assert _no_answer(err, err.event_ids) and err.event_ids[0] in ("ss-2", "ss-3"), err
                pub.publish_batch([replace(ev(t, i), event_id=err.event_ids[0])])
    assert sorted(e["content"]["i"] for e in _stored(http_url, t, 2)) == [3, 4]


def test_a_done_callback_that_publishes_into_a_full_queue_never_blocks_the_publisher(grpc_target, http_url, thread):
    """Done-callbacks run on the publisher's worker thread. One that published more than
    max_queued events blocked the worker on its own full queue: nothing was sent again and
    close() never returned. From that thread, publish() now admits the event past the bound,
    and flush(), publish_many() and close(), which would wait for the worker itself, raise at
    once (and the publisher stays open)."""
    pub = Publisher(grpc_target, max_queued=2)
    chained: list = []
    refused: list = []
    done = threading.Event()

    def chain(_f):
        try:
            chained.extend(pub.publish(chunk(thread, i)) for i in range(2, 7))
            for call in (pub.flush, lambda: pub.publish_many([chunk(thread, 9)]), pub.close):
                try:
                    call()
                except RuntimeError as err:
                    refused.append(str(err))
        finally:
            done.set()

    pub.publish(chunk(thread, 1)).add_done_callback(chain)
    assert done.wait(30), "the callback is blocked in publish()"
    assert [f.result(30).event_id for f in chained] == [f"e{i}" for i in range(2, 7)]
    assert len(refused) == 3 and all("worker thread" in r for r in refused), refused
    closer = threading.Thread(target=pub.close, daemon=True)
    closer.start()
    closer.join(30)
    assert not closer.is_alive(), "close() hung"
    assert [e["event_id"] for e in _stored(http_url, thread, 6)] == [f"e{i}" for i in range(1, 7)]


_BAD_OPTIONS = [
    ("max_request_bytes", float("nan")),
    ("max_request_bytes", float("inf")),
    ("max_request_bytes", 0),
    ("max_request_bytes", 1.5),
    ("max_request_bytes", "16MiB"),
    ("max_batch_events", 0),
    ("max_batch_events", float("nan")),
    ("max_batch_events", True),
    ("max_queued", 0),
    ("max_queued", -1),
    ("max_queued", float("inf")),
    ("max_attempts", 0),
    ("max_attempts", 2.5),
    ("linger_ms", float("nan")),
    ("linger_ms", -1),
    ("linger_ms", float("inf")),
    ("initial_delay_s", float("nan")),
    ("initial_delay_s", -0.1),
    ("max_delay_s", float("inf")),
    ("timeout_s", float("nan")),
    ("timeout_s", 0),
    ("timeout_s", float("inf")),
    ("ack", "persisted"),
    ("id_prefix", "has space"),
]


@pytest.mark.parametrize("name,value", _BAD_OPTIONS)
def test_a_bad_option_is_refused_when_the_publisher_is_made(name, value):
    """max_request_bytes=NaN turned off the size check (every comparison with NaN is false);
    max_queued=0 made the queue unbounded; a NaN linger or deadline misbehaved later. Every
    option is checked when the publisher is made, and the error names it."""
    for cls in (Publisher, AsyncPublisher):
        with pytest.raises(ValueError, match=rf"\b{name}\b"):
            cls("127.0.0.1:1", **{name: value})


def test_every_bad_option_is_named_at_once():
    with pytest.raises(ValueError) as err:
        Publisher("127.0.0.1:1", max_request_bytes=float("nan"), max_queued=0, linger_ms=-1)
    assert all(name in str(err.value) for name in ("max_request_bytes", "max_queued", "linger_ms"))
    # Whole numbers written as floats are fine, as are the defaults.
    Publisher("127.0.0.1:1", max_request_bytes=1e6, max_queued=1e3, linger_ms=0.5).close()


def test_a_sync_stream_send_from_on_cancel_raises_instead_of_waiting_for_itself(grpc_target, http_url, thread):
    """on_cancel runs on the stream's reader thread. A send() from it (the run's end, on hearing
    the cancel) waited for an answer only that thread could read: the stream stopped for good."""
    heard: list = []
    done = threading.Event()
    with Publisher(grpc_target, ack="PERSISTED") as pub:

        def on_cancel(c):
            try:
                stream.send([Event(thread, "run-x", "run_end", "lifecycle", {"status": "cancelled"}, event_id="x2")])
            except RuntimeError as err:
                heard.append(str(err))
            finally:
                done.set()

        stream = pub.open_stream(on_cancel=on_cancel)
        stream.send([Event(thread, "run-x", "run_start", "lifecycle", {}, event_id="x1")], timeout=30)
        HistoryClient(http_url).cancel_run(thread, "run-x")
        assert done.wait(60), "send() in on_cancel is waiting for itself"
        assert len(heard) == 1 and "reader thread" in heard[0], heard
        # The stream goes on: the run's end, sent from this thread.
        [end] = stream.send([Event(thread, "run-x", "run_end", "lifecycle", {"status": "cancelled"}, event_id="x2")], timeout=30)
        assert end.seq == 3
        stream.close()


def test_credentials_make_the_channel_tls_behind_a_tls_terminating_proxy(tls_target, http_url, thread):
    """Both publishers reach the broker through a TLS-terminating proxy with TLS credentials,
    and a plaintext channel gets no answer there."""
    target, ca = tls_target
    creds = grpc.ssl_channel_credentials(root_certificates=ca)
    with Publisher(target, ack="PERSISTED", credentials=creds) as pub:
        acks = [f.result(30) for f in [pub.publish(Event(thread, "r", "ai_chunk", "message", {"i": i}, event_id=f"s{i}")) for i in range(3)]]
    assert [a.duplicate for a in acks] == [False, False, False]

    async def run_async():
        async with AsyncPublisher(target, ack="PERSISTED", credentials=creds) as apub:
            return await asyncio.gather(*[await apub.enqueue(Event(thread, "r", "ai_chunk", "message", {"i": i}, event_id=f"a{i}")) for i in range(3)])

    assert [a.duplicate for a in asyncio.run(run_async())] == [False, False, False]
    with Publisher(target, max_attempts=2, initial_delay_s=0.01, max_delay_s=0.02) as plain:
        with pytest.raises(RunstreamError) as err:
            plain.publish(Event(thread, "r", "ai_chunk", "message", {"i": 9}, event_id="p9")).result(30)
    assert err.value.code == "unavailable"
    with urllib.request.urlopen(f"{http_url}/v1/threads/{thread}/events?limit=100") as res:
        import json

        assert len(json.loads(res.read())["events"]) == 6
