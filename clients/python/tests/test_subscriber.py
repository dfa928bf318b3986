import asyncio

from runstream import Event, HistoryClient, Publisher, subscribe


def chunk(thread, i, category="message"):
    return Event(thread, "run-1", "ai_chunk" if category == "message" else "llm_start", category, {"i": i}, event_id=f"e{i}")


async def _collect_until(sub, pred, items):
    async for item in sub:
        items.append(item)
        if pred(items):
            return


def test_resumes_after_dropped_sockets_with_exactly_1_to_n(grpc_target, ws_url, thread):
    pub = Publisher(grpc_target, ack="PERSISTED")
    pub.publish_many([chunk(thread, i) for i in range(1, 51)])

    async def main():
        sub = subscribe(ws_url, thread, initial_delay_s=0.02, max_delay_s=0.3)
        items = []
        events = lambda: [i for i in items if i.type == "event"]  # noqa: E731
        agen = sub.__aiter__()
        while len(events()) < 20:
            items.append(await agen.__anext__())
        sub._ws.transport.abort()  # the socket drops mid-stream
        await asyncio.to_thread(pub.publish_many, [chunk(thread, i) for i in range(51, 101)])
        while len(events()) < 60:
            items.append(await agen.__anext__())
        sub._ws.transport.abort()
        # Published after the second drop: only a third connection can deliver these.
        await asyncio.to_thread(pub.publish_many, [chunk(thread, i) for i in range(101, 151)])
        while len(events()) < 150:
            items.append(await agen.__anext__())
        await sub.close()
        await agen.aclose()
        return items, sub

    items, sub = asyncio.run(main())
    pub.close()
    seqs = [i.event["seq"] for i in items if i.type == "event"]
    assert seqs == list(range(1, 151))
    assert sub.reconnects >= 2
    assert sum(1 for i in items if i.type == "reconnecting") >= 2


def test_a_filtered_subscription_resumes_from_its_cursor(grpc_target, ws_url, thread):
    cat = lambda i: "message" if i % 3 == 0 else "trace"  # noqa: E731
    with Publisher(grpc_target, ack="PERSISTED") as pub:
        pub.publish_many([chunk(thread, i, cat(i)) for i in range(1, 31)])

        async def main():
            sub = subscribe(ws_url, thread, categories=["message"], initial_delay_s=0.02, max_delay_s=0.3)
            items = []
            agen = sub.__aiter__()
            while not any(i.type == "live" for i in items):
                items.append(await agen.__anext__())
            assert sub.cursor == 30
            sub._ws.transport.abort()
            await asyncio.to_thread(pub.publish_many, [chunk(thread, i, cat(i)) for i in range(31, 61)])
            while sum(1 for i in items if i.type == "event") < 20:
                items.append(await agen.__anext__())
            await sub.close()
            await agen.aclose()
            return items

        items = asyncio.run(main())
    assert [i.event["seq"] for i in items if i.type == "event"] == [i for i in range(1, 61) if cat(i) == "message"]


def test_run_end_deletion_and_refusals_are_items(grpc_target, http_url, ws_url, thread):
    with Publisher(grpc_target, ack="PERSISTED") as pub:
        pub.publish_batch(
            [
                Event(thread, "r1", "run_start", "lifecycle", {}, event_id="a1"),
                Event(thread, "r1", "ai_chunk", "message", {"content": "x"}, event_id="a2"),
                Event(thread, "r1", "run_end", "lifecycle", {"status": "success"}, event_id="a3"),
            ]
        )

    async def collect(**kw):
        return [i async for i in subscribe(ws_url, thread, **kw)]

    items = asyncio.run(collect(run_id="r1"))
    assert [i.type for i in items] == ["event", "event", "event", "end"]
    assert (items[-1].seq, items[-1].status) == (3, "success")

    ahead = asyncio.run(collect(after_seq=99))
    assert ahead[-1].type == "error" and ahead[-1].error.code == "cursor_ahead" and not ahead[-1].retrying

    async def deleted():
        items = []
        async for item in subscribe(ws_url, thread):
            items.append(item)
            if item.type == "live":
                await asyncio.to_thread(HistoryClient(http_url).delete_thread, thread)
        return items

    items = asyncio.run(deleted())
    assert items[-1].type == "deleted" and items[-1].thread_id == thread


def test_subscriber_and_publisher_ride_through_a_broker_kill_and_restart(grpc_target, ws_url, thread):
    """The broker is killed -9 and restarted mid-stream (RUNSTREAM_RESTART_URL, served by the
    test that runs pytest); the publisher retries with the same ids and the subscriber resumes
    from its cursor: exactly 1..N, no duplicate, no gap."""
    import os
    import urllib.request

    restart_url = os.environ.get("RUNSTREAM_RESTART_URL")
    assert restart_url, "RUNSTREAM_RESTART_URL is not set: run through make test"
    pub = Publisher(grpc_target, ack="PERSISTED", max_attempts=10_000, initial_delay_s=0.02, max_delay_s=0.3, timeout_s=5)
    pub.publish_many([chunk(thread, i) for i in range(1, 101)])

    def restart_and_publish():
        import threading

        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        status = []

        def restart():
            with opener.open(urllib.request.Request(restart_url, method="POST", data=b""), timeout=120) as res:
                status.append(res.status)

        killer = threading.Thread(target=restart)
        killer.start()
        # One request at a time while the broker goes down and comes back: each is retried,
        # with the same id, until it is acknowledged.
        acks = [pub.publish(chunk(thread, i)).result(120) for i in range(101, 201)]
        killer.join()
        assert status == [200]
        return acks

    async def main():
        sub = subscribe(ws_url, thread, initial_delay_s=0.02, max_delay_s=0.3)
        items = []
        agen = sub.__aiter__()
        while sum(1 for i in items if i.type == "event") < 100:
            items.append(await agen.__anext__())
        restarted = asyncio.get_running_loop().run_in_executor(None, restart_and_publish)
        while sum(1 for i in items if i.type == "event") < 200:
            items.append(await agen.__anext__())
        acks = await restarted
        await sub.close()
        await agen.aclose()
        return items, acks

    items, acks = asyncio.run(main())
    pub.close()
    assert [a.seq for a in acks] == list(range(101, 201))
    assert [i.event["seq"] for i in items if i.type == "event"] == list(range(1, 201))
    assert [i.event["event_id"] for i in items if i.type == "event"] == [f"e{i}" for i in range(1, 201)]
    assert any(i.type == "reconnecting" for i in items)
