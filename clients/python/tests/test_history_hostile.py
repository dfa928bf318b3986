"""HistoryClient and the DeerFlow store's pagers against a hostile HTTP peer: a fake server on
127.0.0.1 (port 0) in a thread. No broker is needed; nothing here mocks NATS or Postgres."""

import asyncio
import contextlib
import http.server
import json
import math
import threading
import time
from urllib.parse import parse_qs, urlsplit

import pytest

from runstream import HistoryClient, RunstreamError
from runstream.deerflow import RunstreamEventStore

MIB = 1024 * 1024


@contextlib.contextmanager
def hostile_http(answer):
    """An HTTP server whose `answer(handler, path, query)` writes each response. Yields its base
    URL and the requests it got, as (path, query, authorization header)."""
    seen: list[tuple[str, dict, str | None]] = []
    stop = threading.Event()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            url = urlsplit(self.path)
            query = {k: v[0] for k, v in parse_qs(url.query).items()}
            seen.append((url.path, query, self.headers.get("authorization")))
            try:
                answer(self, url.path, query, stop)
            except (BrokenPipeError, ConnectionResetError):
                pass

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        stop.set()
        server.shutdown()
        server.server_close()


def send_json(h, body, status=200):
    data = json.dumps(body).encode()
    h.send_response(status)
    h.send_header("content-type", "application/json")
    h.send_header("content-length", str(len(data)))
    h.end_headers()
    h.wfile.write(data)


def in_thread(fn, timeout_s):
    """Runs fn in a thread; returns (finished, result or exception)."""
    out: list = []

    def run():
        try:
            out.append(fn())
        except BaseException as err:  # noqa: BLE001
            out.append(err)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(timeout_s)
    return (not t.is_alive()), (out[0] if out else None)


def test_a_body_over_max_response_bytes_is_refused_not_buffered():
    """A page is at most RS_MAX_PAGE_BYTES (2 MiB) of content plus its framing; the default bound,
    16 MiB, leaves room for that and refuses a body that could only come from a broken peer."""

    def answer(h, path, query, stop):
        send_json(h, {"events": [{"seq": 1, "content": "a" * (40 * MIB)}], "has_more": False, "next_after_seq": 1})

    with hostile_http(answer) as (url, seen):
        with pytest.raises(RunstreamError) as err:
            HistoryClient(url).list_events("t")
        assert err.value.code == "resource_exhausted"
        with pytest.raises(RunstreamError) as err:
            HistoryClient(url, max_response_bytes=1000).list_events("t")
        assert err.value.code == "resource_exhausted" and "max_response_bytes" in err.value.message


def test_an_endless_body_is_cut_at_the_bound():
    def answer(h, path, query, stop):
        h.send_response(200)
        h.send_header("content-type", "application/json")
        h.end_headers()
        h.wfile.write(b'{"events":[{"seq":1,"content":"')
        chunk = b"a" * MIB
        for _ in range(100):  # 100 MiB, then give up: an unbounded client fails the test, not the machine
            if stop.is_set():
                return
            h.wfile.write(chunk)

    with hostile_http(answer) as (url, seen):
        done, result = in_thread(lambda: HistoryClient(url, max_response_bytes=4 * MIB).list_events("t"), 30)
    assert done
    assert isinstance(result, RunstreamError) and result.code == "resource_exhausted", result


def test_timeout_s_caps_the_whole_request_not_each_read():
    """A body that trickles a byte at a time never trips a per-read timeout; timeout_s is the
    time the whole call may take."""

    def answer(h, path, query, stop):
        h.send_response(200)
        h.send_header("content-type", "application/json")
        h.end_headers()
        h.wfile.write(b'{"events":[')
        while not stop.wait(0.05):
            h.wfile.write(b" ")
            h.wfile.flush()

    with hostile_http(answer) as (url, seen):
        started = time.monotonic()
        done, result = in_thread(lambda: HistoryClient(url, timeout_s=1).list_events("t"), 15)
        took = time.monotonic() - started
    assert done, "still reading after 15 s with timeout_s=1"
    assert isinstance(result, RunstreamError) and result.code == "connection_failed", result
    assert "timeout_s" in result.message
    assert took < 10


def test_headers_that_trickle_are_cut_at_timeout_s_too():
    def answer(h, path, query, stop):
        h.wfile.write(b"HTTP/1.1 200 OK\r\n")
        while not stop.wait(0.05):
            h.wfile.write(b"x-slow: 1\r\n")
            h.wfile.flush()

    with hostile_http(answer) as (url, seen):
        done, result = in_thread(lambda: HistoryClient(url, timeout_s=1).list_events("t"), 15)
    assert done, "still reading headers after 15 s with timeout_s=1"
    assert isinstance(result, RunstreamError) and result.code == "connection_failed", result


def test_a_body_that_is_not_json_is_a_typed_error():
    def answer(h, path, query, stop):
        data = b"<html>proxy error</html>" if path.endswith("/events") else b"[" * 100_000
        h.send_response(200)
        h.send_header("content-length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)

    with hostile_http(answer) as (url, seen):
        for call in (lambda c: c.list_events("t"), lambda c: c.get_run("t", "r")):
            with pytest.raises(RunstreamError) as err:
                call(HistoryClient(url))
            assert err.value.code == "protocol_error" and err.value.status == 200


def test_a_redirect_to_another_origin_is_refused_and_the_token_never_sent_there():
    with hostile_http(lambda h, path, query, stop: send_json(h, {"events": [], "has_more": False})) as (other, other_seen):

        def answer(h, path, query, stop):
            h.send_response(302)
            h.send_header("location", other + path)
            h.send_header("content-length", "0")
            h.end_headers()

        with hostile_http(answer) as (url, seen):
            with pytest.raises(RunstreamError) as err:
                HistoryClient(url, token="SECRET-TOKEN").list_events("t")
    assert err.value.code == "connection_failed" and err.value.status == 302
    assert "another origin" in err.value.message
    assert other_seen == []
    assert seen[0][2] == "Bearer SECRET-TOKEN"


def test_a_redirect_within_the_origin_is_followed_with_the_token():
    def answer(h, path, query, stop):
        if path == "/v1/threads/t/events":
            h.send_response(307)
            h.send_header("location", "/moved/events")
            h.send_header("content-length", "0")
            h.end_headers()
        else:
            send_json(h, {"events": [], "has_more": False, "next_after_seq": 0})

    with hostile_http(answer) as (url, seen):
        page = HistoryClient(url, token="tok").list_events("t")
    assert page["has_more"] is False
    assert [(p, auth) for p, _, auth in seen] == [("/v1/threads/t/events", "Bearer tok"), ("/moved/events", "Bearer tok")]


def same_cursor(h, path, query, stop):
    """has_more forever, with the cursor it was asked for."""
    if "before_seq" in query:
        send_json(h, {"events": [], "has_more": True, "next_before_seq": int(query["before_seq"])})
    else:
        send_json(h, {"events": [], "has_more": True, "next_after_seq": int(query.get("after_seq", 0))})


PAGERS = {
    "list_messages ascending": lambda s: s.list_messages("t", after_seq=0),
    "list_messages descending": lambda s: s.list_messages("t"),
    "list_messages_by_run": lambda s: s.list_messages_by_run("t", "r", before_seq=50),
    "list_events": lambda s: s.list_events("t", "r"),
    "list_events task_id empty": lambda s: s.list_events("t", "r", task_id=""),
    "get_last_visible_ai_seq_by_run": lambda s: s.get_last_visible_ai_seq_by_run("t", {"r"}),
    "find_latest_ai_message_run_ids": lambda s: s.find_latest_ai_message_run_ids("t", {"m1"}),
}


@pytest.mark.parametrize("call", PAGERS.values(), ids=PAGERS.keys())
def test_a_pager_stops_with_an_error_when_historys_cursor_does_not_move(call):
    async def main(url):
        store = RunstreamEventStore(grpc_target="127.0.0.1:9", http_url=url)
        try:
            return await asyncio.wait_for(call(store), 10)
        finally:
            await store.close()

    with hostile_http(same_cursor) as (url, seen):
        with pytest.raises(RunstreamError) as err:
            asyncio.run(main(url))
    assert err.value.code == "protocol_error" and "has_more" in err.value.message
    assert len(seen) == 1


@pytest.mark.parametrize("name,value", [("timeout_s", 0), ("timeout_s", -1), ("timeout_s", math.nan), ("timeout_s", math.inf), ("max_response_bytes", 0), ("max_response_bytes", 1.5)])
def test_a_bad_history_option_is_refused(name, value):
    with pytest.raises(ValueError, match=rf"\b{name}\b"):
        HistoryClient("http://127.0.0.1:9", **{name: value})
