"""A client for the History API over HTTP (docs/api.md), on the standard library only.

Every method is synchronous; :class:`AsyncHistoryClient` runs the same calls in a thread.

What a peer can make it hold is bounded: ``timeout_s`` is the time one call may take in all
(connect, redirects, headers and body; a long-poll's ``wait_ms`` is added to it), and a body
past ``max_response_bytes`` is refused (``resource_exhausted``) without being read further.
A redirect is followed only within the broker's origin (scheme, host and port), so the token is
never sent anywhere else; one to another origin is refused (``connection_failed``).
"""

from __future__ import annotations

import asyncio
import http.client
import json
import socket
import threading
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

from runstream._common import MAX_SEQ, OptionChecks, RunstreamError

__all__ = ["MAX_LIMIT", "MAX_SEQ", "AsyncHistoryClient", "HistoryClient", "next_cursor"]

MAX_LIMIT = 1000
DEFAULT_TIMEOUT_S = 30.0
# A page holds at most RS_MAX_PAGE_BYTES (2 MiB by default) of content and metadata, plus its
# framing (ids, times, up to 1000 events); eight times that leaves room for a broker with
# larger pages and still refuses a body only a broken or hostile peer sends.
DEFAULT_MAX_RESPONSE_BYTES = 16 * 1024 * 1024
# An error body is the broker's {"error":{"code","message"}}: read that much of it at most.
_MAX_ERROR_BODY_BYTES = 64 * 1024
_READ_BYTES = 64 * 1024


def _seg(s: str) -> str:
    return quote(s, safe="")


def _origin(url: str) -> tuple[str, str, int | None]:
    u = urlsplit(url)
    scheme = u.scheme.lower()
    return scheme, (u.hostname or "").lower(), u.port or {"http": 80, "https": 443}.get(scheme)


def next_cursor(page: Any, cursor: int, *, ascending: bool) -> int | None:
    """The cursor to ask for the page after ``page`` (``next_after_seq`` ascending,
    ``next_before_seq`` descending), or None when History says there is no more. A page that
    says ``has_more`` without a cursor that moves past ``cursor`` would be asked for again
    forever: that is History's error (``internal``), not a reason to loop."""
    field = "next_after_seq" if ascending else "next_before_seq"
    if not isinstance(page, dict) or not isinstance(page.get("events"), list) or not isinstance(page.get("has_more"), bool):
        raise RunstreamError("protocol_error", "History answered something that is not an events page")
    if not page["has_more"]:
        return None
    nxt = page.get(field)
    moved = isinstance(nxt, int) and not isinstance(nxt, bool) and (nxt > cursor if ascending else 0 <= nxt < cursor)
    if not moved:
        raise RunstreamError("protocol_error", f"History said has_more, but its {field} {nxt!r} does not move past {cursor}")
    return nxt


class _Deadline:
    """One call's whole time: when it passes, the sockets the call opened are shut down, which
    ends a connect, header or body read that a per-read timeout would let trickle on."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.expired = False
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._timer = threading.Timer(seconds, self._expire)
        self._timer.daemon = True
        self._timer.start()

    def watch(self, sock: socket.socket) -> None:
        with self._lock:
            self._sockets.append(sock)
            expired = self.expired
        if expired:
            self._shut(sock)

    def _expire(self) -> None:
        with self._lock:
            self.expired = True
            sockets = list(self._sockets)
        for sock in sockets:
            self._shut(sock)

    @staticmethod
    def _shut(sock: socket.socket) -> None:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def cancel(self) -> None:
        self._timer.cancel()


class _Watched:
    """A connection whose socket the call's deadline watches from the moment it connects."""

    def __init__(self, *args, deadline: _Deadline, **kwargs):
        super().__init__(*args, **kwargs)
        self._deadline = deadline

    def connect(self) -> None:
        super().connect()
        self._deadline.watch(self.sock)


class _HTTPConnection(_Watched, http.client.HTTPConnection):
    pass


class _HTTPSConnection(_Watched, http.client.HTTPSConnection):
    pass


class _HTTPHandler(urllib.request.HTTPHandler):
    def __init__(self, deadline: _Deadline):
        super().__init__()
        self._deadline = deadline

    def http_open(self, req):
        return self.do_open(_HTTPConnection, req, deadline=self._deadline)


class _HTTPSHandler(urllib.request.HTTPSHandler):
    def __init__(self, deadline: _Deadline):
        super().__init__()
        self._deadline = deadline

    def https_open(self, req):
        return self.do_open(_HTTPSConnection, req, context=self._context, deadline=self._deadline)


class _SameOriginRedirects(urllib.request.HTTPRedirectHandler):
    """urllib copies every header, the token too, onto a redirect: follow one only within the
    origin the call was made to."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        if _origin(newurl) != _origin(req.full_url):
            fp.close()
            scheme, host, port = _origin(newurl)
            raise RunstreamError(
                "connection_failed",
                f"{req.get_method()} {urlsplit(req.full_url).path}: redirected ({code}) to another origin, "
                f"{scheme}://{host}:{port}; not followed, so the token is not sent there",
                status=code,
            )
        return super().redirect_request(req, fp, code, msg, headers, newurl)


def _read(res, limit: int) -> bytes | None:
    """At most ``limit`` bytes of the body, or None when it has more."""
    length = res.headers.get("content-length")
    if length is not None and length.strip().isdigit() and int(length) > limit:
        return None
    chunks: list[bytes] = []
    size = 0
    while True:
        chunk = res.read(min(_READ_BYTES, limit + 1 - size))
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        size += len(chunk)
        if size > limit:
            return None


class HistoryClient:
    """History over HTTP. ``timeout_s`` (above 0) is the time one call may take in all;
    ``max_response_bytes`` (at least 1) bounds the body a call reads."""

    def __init__(
        self,
        url: str,
        *,
        token: str | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
    ):
        check = OptionChecks()
        self.timeout_s = check.seconds("timeout_s", timeout_s, positive=True)
        self.max_response_bytes = check.count("max_response_bytes", max_response_bytes)
        check.done()
        self.base = url.rstrip("/")
        self.token = token

    def request(
        self, method: str, path: str, params: dict[str, Any] | None = None, body: Any = None, *, wait_s: float = 0.0
    ) -> Any:
        """One call; ``wait_s`` is how long the broker may hold it (a long-poll), on top of ``timeout_s``."""
        query = {}
        for k, v in (params or {}).items():
            if v is None:
                continue
            if isinstance(v, (list, tuple, set)):
                if v:
                    query[k] = ",".join(v)
            elif isinstance(v, bool):
                query[k] = "true" if v else "false"
            else:
                query[k] = str(v)
        url = self.base + path + (f"?{urlencode(query)}" if query else "")
        headers = {"accept": "application/json"}
        if self.token:
            headers["authorization"] = f"Bearer {self.token}"
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["content-type"] = "application/json"
        req = urllib.request.Request(url, data=data, method=method, headers=headers)
        what = f"{method} {path}"
        deadline = _Deadline(self.timeout_s + wait_s)
        # Never through a proxy: the broker is addressed directly. One opener per call: the
        # handlers carry the call's deadline.
        opener = urllib.request.build_opener(
            urllib.request.ProxyHandler({}), _HTTPHandler(deadline), _HTTPSHandler(deadline), _SameOriginRedirects()
        )
        status = 0
        try:
            with opener.open(req, timeout=deadline.seconds) as res:
                status = res.status
                raw = _read(res, self.max_response_bytes)
        except urllib.error.HTTPError as err:
            try:
                text = (_read(err, _MAX_ERROR_BODY_BYTES) or b"").decode(errors="replace")
            except (OSError, http.client.HTTPException, AttributeError):
                text = ""
            finally:
                err.close()
            try:
                e = json.loads(text)["error"]
                raise RunstreamError(str(e["code"]), str(e["message"]), status=err.code) from None
            except (ValueError, KeyError, TypeError, RecursionError):
                raise RunstreamError("internal", text or str(err), status=err.code) from None
        except (OSError, http.client.HTTPException) as err:
            if deadline.expired:
                raise RunstreamError("connection_failed", f"{what}: took longer than timeout_s ({deadline.seconds:g} s)") from None
            raise RunstreamError("connection_failed", f"{what}: {err}") from None
        finally:
            deadline.cancel()
        if deadline.expired:  # the body may have ended where the deadline cut it
            raise RunstreamError("connection_failed", f"{what}: took longer than timeout_s ({deadline.seconds:g} s)")
        if raw is None:
            raise RunstreamError(
                "resource_exhausted", f"{what}: the answer is larger than max_response_bytes ({self.max_response_bytes})", status=status
            )
        if not raw:
            return {}
        try:
            return json.loads(raw.decode())
        except (ValueError, RecursionError):
            raise RunstreamError("protocol_error", f"{what}: the answer is not JSON", status=status) from None

    def list_events(
        self,
        thread_id: str,
        *,
        run_id: str | None = None,
        after_seq: int | None = None,
        before_seq: int | None = None,
        limit: int | None = None,
        categories: list[str] | None = None,
        event_types: list[str] | None = None,
        user_id: str | None = None,
        wait_ms: int | None = None,
        task_id: str | None = None,
    ) -> dict:
        """A page of events; ``task_id`` keeps only events whose ``metadata.task_id`` is that string."""
        path = f"/v1/threads/{_seg(thread_id)}" + (f"/runs/{_seg(run_id)}" if run_id else "") + "/events"
        wait_s = wait_ms / 1000 if OptionChecks.real(wait_ms) and wait_ms > 0 else 0.0
        return self.request(
            "GET",
            path,
            {
                "after_seq": after_seq,
                "before_seq": before_seq,
                "limit": limit,
                "categories": categories,
                "event_types": event_types,
                "user_id": user_id,
                "wait_ms": wait_ms,
                "metadata.task_id": task_id,
            },
            wait_s=wait_s,
        )

    def list_messages(self, thread_id: str, *, run_id: str | None = None, view: str | None = None, **paging) -> dict:
        path = f"/v1/threads/{_seg(thread_id)}" + (f"/runs/{_seg(run_id)}" if run_id else "") + "/messages"
        return self.request("GET", path, {**paging, "view": view})

    def count_messages(self, thread_id: str, *, run_id: str | None = None, user_id: str | None = None) -> int:
        body = self.request(
            "GET", f"/v1/threads/{_seg(thread_id)}/messages/count", {"run_id": run_id, "user_id": user_id}
        )
        return int(body["count"])

    def get_run(self, thread_id: str, run_id: str, *, user_id: str | None = None) -> dict:
        return self.request("GET", f"/v1/threads/{_seg(thread_id)}/runs/{_seg(run_id)}", {"user_id": user_id})

    def list_runs(self, thread_id: str, **params) -> dict:
        return self.request("GET", f"/v1/threads/{_seg(thread_id)}/runs", params)

    def delete_thread(self, thread_id: str, *, user_id: str | None = None) -> dict:
        return self.request("DELETE", f"/v1/threads/{_seg(thread_id)}", {"user_id": user_id})

    def delete_run(self, thread_id: str, run_id: str, *, user_id: str | None = None) -> dict:
        return self.request("DELETE", f"/v1/threads/{_seg(thread_id)}/runs/{_seg(run_id)}", {"user_id": user_id})

    def cancel_run(self, thread_id: str, run_id: str, reason: str | None = None) -> dict:
        body = {} if reason is None else {"reason": reason}
        return self.request("POST", f"/v1/threads/{_seg(thread_id)}/runs/{_seg(run_id)}/cancel", body=body)


class AsyncHistoryClient:
    """:class:`HistoryClient`'s calls, awaited (each runs in a worker thread)."""

    def __init__(
        self,
        url: str,
        *,
        token: str | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
    ):
        self.sync = HistoryClient(url, token=token, timeout_s=timeout_s, max_response_bytes=max_response_bytes)

    def __getattr__(self, name: str):
        fn = getattr(self.sync, name)

        async def call(*args, **kwargs):
            return await asyncio.to_thread(fn, *args, **kwargs)

        return call
