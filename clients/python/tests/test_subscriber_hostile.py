"""The subscriber against a hostile WebSocket peer: a fake server on 127.0.0.1 (port 0) that sends
what docs/protocol.md §9 never does. No broker is needed; nothing here mocks NATS or Postgres."""

import asyncio
import contextlib
import json
import math

import pytest
import websockets

from runstream import subscribe

MIB = 1024 * 1024


def ev(seq, **extra):
    return json.dumps({"type": "event", "id": "s1", "event": {"seq": seq, "content": seq, **extra}})


def live(seq):
    return json.dumps({"type": "live", "id": "s1", "seq": seq})


@contextlib.asynccontextmanager
async def hostile_ws(script):
    """A WebSocket server whose `script(n, ws, subscribe_frame)` plays the n-th connection (from
    0). Yields the URL and the subscribe frames received, one per connection."""
    subscribes: list[dict] = []

    async def handler(ws, path=None):
        n = len(subscribes)
        subscribes.append(json.loads(await ws.recv()))
        await script(n, ws, subscribes[-1])

    async with websockets.serve(handler, "127.0.0.1", 0, max_size=None, compression=None) as server:
        port = server.sockets[0].getsockname()[1]
        yield f"ws://127.0.0.1:{port}/v1/ws", subscribes


async def collect(sub, until, timeout_s=10.0):
    """Items until `until(items)` or the end, within `timeout_s` (a hung subscription fails)."""
    items = []

    async def run():
        async for item in sub:
            items.append(item)
            if until(items):
                return

    try:
        await asyncio.wait_for(run(), timeout_s)
    finally:
        await sub.close()
    return items


def seqs(items):
    return [i.event["seq"] for i in items if i.type == "event"]


def saw_live(items):
    return any(i.type == "live" for i in items)


class Raw(bytes):
    """A text frame's payload sent as is (websockets would encode a str as UTF-8)."""


# Frames that are not what protocol.md says the broker sends, each arriving between seq 1 and 2.
MALFORMED = {
    "not JSON": "<html>hi</html>",
    "JSON null": "null",
    "a JSON array": "[1, 2]",
    "a JSON string": '"event"',
    "an event without event": '{"type":"event","id":"s1"}',
    "an event that is no object": '{"type":"event","id":"s1","event":[2]}',
    "an event without seq": '{"type":"event","id":"s1","event":{"content":2}}',
    "seq as a string": ev("2"),
    "an event of another thread": ev(2, thread_id="another-thread"),
    "seq as a float": ev(2.5),
    "seq true": ev(True),
    "seq 0": ev(0),
    "a negative seq": ev(-4),
    "seq past 2^53-1": ev(2**53),
    "an error without code": '{"type":"error","id":"s1","seq":1,"message":"x"}',
    "an error with seq as a string": '{"type":"error","id":"s1","code":"internal","message":"x","seq":"1"}',
    "a connection error without code": '{"type":"error","id":null,"message":"x"}',
    "a connection error whose cursors is a list": '{"type":"error","id":null,"code":"x","message":"y","cursors":[1]}',
    "a connection error whose cursor is a string": '{"type":"error","id":null,"code":"x","message":"y","cursors":{"s1":"9"}}',
    "live without seq": '{"type":"live","id":"s1"}',
    "chat without seq": '{"type":"chat","id":"s1","message":{}}',
    "end without run_id": '{"type":"end","id":"s1","seq":3,"status":"success"}',
    "deleted without thread_id": '{"type":"deleted","id":"s1"}',
    "deeply nested JSON": "[" * 100_000 + "]" * 100_000,
    "a binary frame": ev(2).encode(),
    "a text frame that is not UTF-8": Raw(b'{"type":"live","id":"s1","seq":\xff}'),
}


@pytest.mark.parametrize("frame", MALFORMED.values(), ids=MALFORMED.keys())
def test_a_malformed_frame_resumes_from_the_cursor_with_nothing_skipped_or_repeated(frame):
    """A frame the broker never sends is a protocol error: it is not yielded, nothing is raised
    out of `async for`, and the subscriber reconnects and resumes from its cursor, so a frame a
    proxy mangled costs one reconnect and no seq."""

    async def script(n, ws, sub):
        if n == 0:
            await ws.send(ev(1))
            if isinstance(frame, Raw):
                await ws.write_frame(True, 0x1, bytes(frame))
            else:
                await ws.send(frame)
            await ws.send(ev(2))  # after the bad frame: read again on the next connection
        else:
            await ws.send(ev(2))
            await ws.send(ev(3))
            await ws.send(live(3))
        await ws.wait_closed()

    async def main():
        async with hostile_ws(script) as (url, subscribes):
            items = await collect(subscribe(url, "t", initial_delay_s=0.01, max_delay_s=0.05), saw_live)
            return items, subscribes

    items, subscribes = asyncio.run(main())
    assert seqs(items) == [1, 2, 3]
    assert not [i for i in items if i.type == "error"]
    [reconnecting] = [i for i in items if i.type == "reconnecting"]
    assert "protocol error" in reconnecting.reason
    assert reconnecting.seq == 1
    assert [s.get("after_seq") for s in subscribes] == [0, 1]


def test_a_frame_of_an_unknown_type_or_another_subscription_is_ignored():
    """Forward compatibility: a frame type this client does not know, or a frame for another
    subscription id, is skipped on the same connection."""

    async def script(n, ws, sub):
        await ws.send(ev(1))
        await ws.send('{"type":"hello","id":"s1","whatever":[1]}')
        await ws.send('{"type":"event","id":"s9","event":null}')
        await ws.send(ev(2))
        await ws.send(live(2))
        await ws.wait_closed()

    async def main():
        async with hostile_ws(script) as (url, subscribes):
            return await collect(subscribe(url, "t"), saw_live), subscribes

    items, subscribes = asyncio.run(main())
    assert seqs(items) == [1, 2]
    assert len(subscribes) == 1


def test_a_frame_over_the_default_bound_ends_the_subscription_without_buffering_it_again():
    """max_frame_bytes (16 MiB by default) bounds what one frame may make the client hold; the
    same frame would come again on every resume, so the subscription ends with a typed error."""

    async def script(n, ws, sub):
        await ws.send(ev(1))
        await ws.send(ev(2, pad="x" * (17 * MIB)))
        await ws.wait_closed()

    async def main():
        async with hostile_ws(script) as (url, subscribes):
            return await collect(subscribe(url, "t", initial_delay_s=0.01), lambda items: False), subscribes

    items, subscribes = asyncio.run(main())
    assert seqs(items) == [1]
    assert items[-1].type == "error" and items[-1].error.code == "frame_too_large" and not items[-1].retrying
    assert len(subscribes) == 1


def test_max_frame_bytes_sets_the_bound():
    async def script(n, ws, sub):
        await ws.send(ev(1, pad="x" * 50_000))
        await ws.send(ev(2, pad="x" * 200_000))
        await ws.wait_closed()

    async def main():
        async with hostile_ws(script) as (url, subscribes):
            sub = subscribe(url, "t", max_frame_bytes=100_000, initial_delay_s=0.01)
            return await collect(sub, lambda items: False), subscribes

    items, subscribes = asyncio.run(main())
    assert seqs(items) == [1]
    assert items[-1].type == "error" and items[-1].error.code == "frame_too_large"
    assert "max_frame_bytes" in items[-1].error.message
    assert len(subscribes) == 1


def test_a_refreshed_token_refused_again_backs_off_and_counts_against_max_reconnects():
    """Close 4001 with get_token: the first refresh is immediate; a fresh token closed with 4001
    again before anything new waits with backoff, and max_reconnects ends it."""
    tokens = []

    async def script(n, ws, sub):
        await ws.send('{"type":"error","id":null,"code":"token_expired","message":"x","cursors":{"s1":0}}')
        await ws.close(4001, "token expired")

    def get_token():
        tokens.append(len(tokens))
        return f"tok{len(tokens)}"

    async def main():
        async with hostile_ws(script) as (url, subscribes):
            sub = subscribe(url, "t", get_token=get_token, max_reconnects=3, initial_delay_s=0.01, max_delay_s=0.05)
            return await collect(sub, lambda items: False), subscribes

    items, subscribes = asyncio.run(main())
    reconnecting = [i for i in items if i.type == "reconnecting"]
    assert [i.attempt for i in reconnecting] == [1, 2, 3]
    assert reconnecting[0].delay_s == 0  # the refresh itself is at once
    assert items[-1].type == "error" and items[-1].error.code == "connection_failed" and not items[-1].retrying
    assert len(subscribes) == 4 and len(tokens) == 4


def test_a_token_refresh_after_progress_is_immediate_every_time():
    async def script(n, ws, sub):
        if n < 3:
            await ws.send(ev(n + 1))
            await ws.close(4001, "token expired")
        else:
            await ws.send(live(3))
            await ws.wait_closed()

    async def main():
        async with hostile_ws(script) as (url, subscribes):
            sub = subscribe(url, "t", get_token=lambda: "tok", initial_delay_s=5, max_delay_s=5)
            return await collect(sub, saw_live), subscribes

    items, subscribes = asyncio.run(main())
    assert seqs(items) == [1, 2, 3]
    assert [i.delay_s for i in items if i.type == "reconnecting"] == [0, 0, 0]
    assert [s["after_seq"] for s in subscribes] == [0, 1, 2, 3]


def test_a_get_token_that_raises_is_a_failed_connect_attempt():
    """As in the TypeScript client: the attempt fails, is retried with backoff, and counts
    against max_reconnects; nothing escapes the iterator."""
    calls = []

    def get_token():
        calls.append(1)
        if len(calls) <= 2:
            raise RuntimeError("idp down")
        return "tok"

    async def script(n, ws, sub):
        await ws.send(ev(1))
        await ws.send(live(1))
        await ws.wait_closed()

    async def main():
        async with hostile_ws(script) as (url, subscribes):
            sub = subscribe(url, "t", get_token=get_token, initial_delay_s=0.01, max_delay_s=0.05)
            return await collect(sub, saw_live), subscribes

    items, subscribes = asyncio.run(main())
    assert [i.type for i in items] == ["reconnecting", "reconnecting", "event", "live"]
    assert all("get_token" in i.reason and "idp down" in i.reason for i in items[:2])
    assert len(subscribes) == 1

    async def always_fails():
        async def boom():
            raise RuntimeError("idp down")

        return await collect(subscribe("ws://127.0.0.1:9/v1/ws", "t", get_token=boom, max_reconnects=1, initial_delay_s=0.01), lambda items: False)

    items = asyncio.run(always_fails())
    assert [i.type for i in items] == ["reconnecting", "error"]
    assert items[-1].error.code == "connection_failed" and "get_token" in items[-1].error.message


BAD_OPTIONS = [
    ("after_seq", -1),
    ("after_seq", math.nan),
    ("after_seq", 1.5),
    ("after_seq", True),
    ("after_seq", "3"),
    ("after_seq", 2**53),
    ("initial_delay_s", -1),
    ("initial_delay_s", math.inf),
    ("max_delay_s", math.nan),
    ("max_reconnects", -1),
    ("max_reconnects", 1.5),
    ("max_reconnects", math.nan),
    ("max_frame_bytes", 0),
    ("max_frame_bytes", math.inf),
]


@pytest.mark.parametrize("name,value", BAD_OPTIONS)
def test_a_bad_option_is_refused_when_the_subscription_is_made(name, value):
    with pytest.raises(ValueError, match=rf"\b{name}\b"):
        subscribe("ws://127.0.0.1:9/v1/ws", "t", **{name: value})


def test_good_options_are_taken():
    sub = subscribe("ws://127.0.0.1:9/v1/ws", "t", after_seq=2.0, max_reconnects=None, initial_delay_s=0, max_frame_bytes=1)
    assert sub.cursor == 2 and isinstance(sub.cursor, int)
