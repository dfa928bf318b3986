"""A resuming subscriber over WebSocket ``/v1/ws`` (asyncio, ``websockets``).

The same resume rules as the TypeScript client (docs/clients.md): the cursor is the last seq
delivered *or skipped* (events, chat frames, ``live``, the ``seq`` of error frames, the
``cursors`` of slow-consumer and token-expiry frames); after any drop, broker restart or
server close (1001, 4001, 4008, 1013, 1006) it reconnects with exponential backoff and full
jitter and resubscribes with ``after_seq`` = cursor and the same filters, and it never yields
a seq twice. ``end``, ``deleted`` and errors are yielded as typed items.

What the server sends is checked as far as the client reads it (docs/protocol.md §9). A frame
the broker never sends (not JSON, binary, an event without a positive whole ``seq``, an error
without ``code``, …) is a protocol error: it is not yielded, and the client reconnects and
resumes from its cursor, so a frame a proxy mangled costs a reconnect and never a seq. A frame
of a type this client does not know, or of another subscription, is skipped. A frame larger
than ``max_frame_bytes`` ends the subscription (``frame_too_large``): it would come again on
every resume.

    async for item in subscribe("ws://127.0.0.1:8080/v1/ws", "thread-1"):
        if item.type == "event":
            print(item.event["seq"], item.event["content"])
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Awaitable, Callable
from urllib.parse import quote

import websockets
import websockets.exceptions

from runstream._common import (
    DEFAULT_INITIAL_DELAY_S,
    DEFAULT_MAX_DELAY_S,
    MAX_SEQ,
    OptionChecks,
    RunstreamError,
    backoff_delay,
)

SUBSCRIPTION_ID = "s1"
RETRYABLE_CODES = {"unavailable", "internal", "slow_consumer", "token_expired", "resource_exhausted"}
FATAL_CLOSE_CODES = {1002, 1003, 1007, 1008, 1009, 1010}
CLOSE_TOKEN_EXPIRED = 4001
CLOSE_MESSAGE_TOO_BIG = 1009
# What websockets closes with when the server breaks the WebSocket protocol itself, or sends a
# text frame that is not UTF-8: the server's fault, so a resume, not the end (unlike the same
# codes from the server, about this client's frames).
CLIENT_PROTOCOL_CLOSE_CODES = {1002, 1007}
# An event frame carries content and metadata of at most RS_MAX_CONTENT_BYTES each (256 KiB by
# default), and no event is larger than a publish request (RS_MAX_GRPC_MESSAGE_BYTES, 16 MiB).
DEFAULT_MAX_FRAME_BYTES = 16 * 1024 * 1024
# How long a closing handshake may take before the socket is dropped. A peer that sent a frame
# over the bound is still sending it, so its answer to our close never comes: without this the
# subscription would sit in websockets' default 10 s before saying why it ended.
CLOSE_TIMEOUT_S = 2.0


@dataclass
class Item:
    """What a subscription yields. ``type``: event, chat, live, end, deleted, error, reconnecting."""

    type: str
    event: dict | None = None
    chat: dict | None = None
    seq: int | None = None
    run_id: str | None = None
    thread_id: str | None = None
    status: str | None = None
    error: RunstreamError | None = None
    retrying: bool = False
    attempt: int = 0
    delay_s: float = 0.0
    reason: str = ""
    extra: dict = field(default_factory=dict)


class _ProtocolError(Exception):
    """A frame that is not what docs/protocol.md §9 says the broker sends."""


def _is_seq(value: Any, minimum: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and minimum <= value <= MAX_SEQ


def _texts(f: dict, *keys: str) -> bool:
    return all(isinstance(f.get(k), str) for k in keys)


def _parse(raw: str | bytes, thread_id: str) -> dict | None:
    """The frame, checked as far as this client reads it, or None for one to skip (another
    subscription's, or a type this client does not know). Raises :class:`_ProtocolError`."""
    if not isinstance(raw, str):
        raise _ProtocolError("a binary frame")
    try:
        f = json.loads(raw)
    except (ValueError, RecursionError):
        raise _ProtocolError(f"a frame that is not JSON: {raw[:100]!r}") from None
    if not isinstance(f, dict) or not isinstance(f.get("type"), str):
        raise _ProtocolError(f"a frame that is not an object with a type: {raw[:100]!r}")
    t = f["type"]
    if t == "error" and f.get("id") is None:
        cursors = f.get("cursors")
        ok = _texts(f, "code", "message") and (
            cursors is None
            or (isinstance(cursors, dict) and (cursors.get(SUBSCRIPTION_ID) is None or _is_seq(cursors[SUBSCRIPTION_ID], 0)))
        )
    elif f.get("id") != SUBSCRIPTION_ID:
        return None
    elif t == "event":
        ok = (
            isinstance(f.get("event"), dict)
            and _is_seq(f["event"].get("seq"), 1)
            # An event of another thread is never this subscription's (the broker always names it).
            and f["event"].get("thread_id", thread_id) == thread_id
        )
    elif t == "chat":
        ok = _is_seq(f.get("seq"), 1) and isinstance(f.get("message"), dict)
    elif t == "live":
        ok = _is_seq(f.get("seq"), 0)
    elif t == "end":
        ok = _is_seq(f.get("seq"), 1) and _texts(f, "run_id", "status")
    elif t == "deleted":
        ok = _texts(f, "thread_id") and (f.get("run_id") is None or isinstance(f["run_id"], str))
    elif t == "error":
        ok = _texts(f, "code", "message") and (f.get("seq") is None or _is_seq(f["seq"], 0))
    else:
        return None
    if not ok:
        raise _ProtocolError(f"a malformed {t} frame: {raw[:100]!r}")
    return f


@dataclass
class _Outcome:
    """How one connection ended."""

    final: bool = False
    # It delivered something new: the backoff starts over.
    progressed: bool = False
    # Closed with 4001 and get_token is set: reconnect with a fresh token.
    token_expired: bool = False
    reason: str = ""


class Subscription:
    """An async iterator of :class:`Item`; ``cursor`` is where it would resume.

    The options are checked here: ``ValueError`` names each bad one (``after_seq`` a whole number
    from 0 to 2^53 - 1, delays finite and not negative, ``max_reconnects`` a whole number of at
    least 0 or None for no limit, ``max_frame_bytes`` a whole number of at least 1).
    ``get_token`` is called before every connection; one that raises (or returns no string) is a
    failed connection attempt, retried with backoff and counted against ``max_reconnects``.
    """

    def __init__(
        self,
        url: str,
        thread_id: str,
        *,
        after_seq: int | None = None,
        live_only: bool = False,
        run_id: str | None = None,
        categories: list[str] | None = None,
        event_types: list[str] | None = None,
        view: str | None = None,
        token: str | None = None,
        get_token: Callable[[], str | Awaitable[str]] | None = None,
        initial_delay_s: float = DEFAULT_INITIAL_DELAY_S,
        max_delay_s: float = DEFAULT_MAX_DELAY_S,
        max_reconnects: int | None = None,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
    ):
        if after_seq is not None and live_only:
            raise RunstreamError("invalid_argument", "give at most one of after_seq and live_only")
        check = OptionChecks()
        start = None if after_seq is None else check.count("after_seq", after_seq, minimum=0, maximum=MAX_SEQ)
        self._delays = (check.seconds("initial_delay_s", initial_delay_s), check.seconds("max_delay_s", max_delay_s))
        self._max_reconnects = None if max_reconnects is None else check.count("max_reconnects", max_reconnects, minimum=0)
        self._max_frame_bytes = check.count("max_frame_bytes", max_frame_bytes)
        check.done()
        self.url = url
        self.thread_id = thread_id
        self.cursor: int | None = start if start is not None else (None if live_only else 0)
        self.run_id = run_id
        self.categories = categories
        self.event_types = event_types
        self.view = view
        self._token = token
        self._get_token = get_token
        self._closed = False
        self._ws = None
        self.reconnects = 0

    def _frame(self) -> dict:
        f: dict[str, Any] = {"type": "subscribe", "id": SUBSCRIPTION_ID, "thread_id": self.thread_id}
        if self.cursor is not None:
            f["after_seq"] = self.cursor
        else:
            f["live_only"] = True
        if self.run_id is not None:
            f["run_id"] = self.run_id
        if self.categories is not None:
            f["categories"] = list(self.categories)
        if self.event_types is not None:
            f["event_types"] = list(self.event_types)
        if self.view is not None:
            f["view"] = self.view
        return f

    async def _url(self) -> str:
        token = self._token
        if self._get_token is not None:
            got = self._get_token()
            token = await got if inspect.isawaitable(got) else got
            if token is not None and not isinstance(token, str):
                raise TypeError(f"returned {type(token).__name__}, not a string")
        if not token:
            return self.url
        return f"{self.url}{'&' if '?' in self.url else '?'}access_token={quote(token)}"

    def _advance(self, seq: int) -> bool:
        if self.cursor is None or seq > self.cursor:
            self.cursor = seq
            return True
        return False

    async def close(self) -> None:
        self._closed = True
        if self._ws is not None:
            await self._ws.close()

    def __aiter__(self) -> AsyncIterator[Item]:
        return self._run()

    async def _run(self) -> AsyncIterator[Item]:
        attempt = 0
        # A fresh token was tried after a 4001 and nothing new has come since.
        refresh_spent = False
        while not self._closed:
            out = _Outcome()
            async with contextlib.aclosing(self._connection(out)) as items:
                async for item in items:
                    yield item
            if out.final or self._closed:
                return
            if out.progressed:
                attempt = 0
                refresh_spent = False
            # After 4001 the fresh token is fetched at once; one refused again before anything
            # new came waits, and counts, like any failed attempt.
            immediate = out.token_expired and not refresh_spent
            refresh_spent = refresh_spent or out.token_expired
            if self._max_reconnects is not None and attempt >= self._max_reconnects:
                yield Item("error", error=RunstreamError("connection_failed", f"gave up after {attempt} reconnects: {out.reason}"))
                return
            delay = 0.0 if immediate else backoff_delay(attempt, *self._delays)
            attempt += 1
            self.reconnects += 1
            yield Item("reconnecting", attempt=attempt, delay_s=delay, reason=out.reason, seq=self.cursor)
            await asyncio.sleep(delay)

    async def _connection(self, out: _Outcome) -> AsyncIterator[Item]:
        """One connection: yields its items and records in ``out`` how it ended."""
        try:
            url = await self._url()
        except Exception as err:  # the application's callback: a failed attempt, as in TypeScript
            out.reason = f"get_token failed: {err!r}"
            return
        # Chat frames of one event may share its seq; only what the resume point covers is a repeat.
        resumed_after = self.cursor if self.cursor is not None else -1
        reason = ""
        try:
            async with websockets.connect(
                url, compression=None, max_size=self._max_frame_bytes, close_timeout=CLOSE_TIMEOUT_S
            ) as ws:
                self._ws = ws
                await ws.send(json.dumps(self._frame()))
                close_code: int | None = None
                try:
                    async for raw in ws:
                        try:
                            f = _parse(raw, self.thread_id)
                        except _ProtocolError as err:
                            out.reason = f"protocol error: {err}"
                            return
                        if f is None:
                            continue
                        t = f["type"]
                        if t == "error" and f.get("id") is None:
                            c = (f.get("cursors") or {}).get(SUBSCRIPTION_ID)
                            if c is not None:
                                out.progressed |= self._advance(c)
                            reason = f"{f['code']}: {f['message']}"
                        elif t == "event":
                            seq = f["event"]["seq"]
                            if self.cursor is not None and seq <= self.cursor:
                                continue
                            out.progressed |= self._advance(seq)
                            yield Item("event", event=f["event"], seq=seq)
                        elif t == "chat":
                            if f["seq"] <= resumed_after:
                                continue
                            out.progressed |= self._advance(f["seq"])
                            chat = {k: v for k, v in f.items() if k not in ("type", "id")}
                            yield Item("chat", chat=chat, seq=f["seq"])
                        elif t == "live":
                            out.progressed |= self._advance(f["seq"])
                            yield Item("live", seq=f["seq"])
                        elif t == "end":
                            self._advance(f["seq"])
                            out.final = True
                            yield Item("end", run_id=f["run_id"], seq=f["seq"], status=f["status"])
                            return
                        elif t == "deleted":
                            out.final = True
                            yield Item("deleted", thread_id=f["thread_id"], run_id=f.get("run_id"))
                            return
                        elif t == "error":
                            seq = f.get("seq")
                            if seq is not None:
                                out.progressed |= self._advance(seq)
                            retrying = seq is not None and f["code"] in RETRYABLE_CODES
                            err = RunstreamError(f["code"], f["message"], seq=seq)
                            out.final = not retrying
                            yield Item("error", error=err, retrying=retrying)
                            out.reason = str(err)
                            return
                    else:
                        close_code = ws.close_code or 1006
                except websockets.exceptions.ConnectionClosed as cc:
                    if cc.sent is not None and cc.rcvd_then_sent is not True:
                        # This client closed it: over a frame of the server's, or a ping unanswered.
                        code = cc.sent.code
                        if code == CLOSE_MESSAGE_TOO_BIG or isinstance(cc.__cause__, websockets.exceptions.PayloadTooBig):
                            too_large = f"the server sent a frame larger than max_frame_bytes ({self._max_frame_bytes})"
                            out.final = True
                            yield Item("error", error=RunstreamError("frame_too_large", too_large))
                            return
                        what = "protocol error: " if code in CLIENT_PROTOCOL_CLOSE_CODES else ""
                        out.reason = f"{what}closed by this client ({code} {cc.sent.reason})"
                        return
                    close_code = cc.rcvd.code if cc.rcvd is not None else 1006
                if self._closed:
                    out.final = True
                    return
                if close_code == CLOSE_TOKEN_EXPIRED:
                    if self._get_token is None:
                        out.final = True
                        yield Item("error", error=RunstreamError("token_expired", reason or "token expired"))
                        return
                    out.token_expired = True
                elif close_code in FATAL_CLOSE_CODES:
                    out.final = True
                    yield Item("error", error=RunstreamError("invalid_argument", f"closed with {close_code}"))
                    return
                out.reason = f"connection closed ({close_code}){': ' + reason if reason else ''}"
        except websockets.exceptions.InvalidStatusCode as err:
            status = err.status_code
            if status in (400, 403, 404) or (status == 401 and self._get_token is None):
                code = {400: "invalid_argument", 401: "unauthenticated", 403: "permission_denied"}.get(status, "not_found")
                out.final = True
                yield Item("error", error=RunstreamError(code, f"upgrade refused with {status}", status=status))
                return
            out.reason = f"upgrade refused with {status}"
        except (OSError, asyncio.TimeoutError, websockets.exceptions.WebSocketException) as err:
            out.final = self._closed
            out.reason = f"connection failed: {err!r}"
        finally:
            self._ws = None


def subscribe(url: str, thread_id: str, **kwargs) -> Subscription:
    """Opens a resuming subscription (see :class:`Subscription` for the options)."""
    return Subscription(url, thread_id, **kwargs)
