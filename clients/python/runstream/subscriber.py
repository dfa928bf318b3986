"""A resuming subscriber over WebSocket ``/v1/ws`` (asyncio, ``websockets``).

The same resume rules as the TypeScript client (docs/clients.md): the cursor is the last seq
delivered *or skipped* (events, chat frames, ``live``, the ``seq`` of error frames, the
``cursors`` of slow-consumer and token-expiry frames); after any drop, broker restart or
server close (1001, 4001, 4008, 1013, 1006) it reconnects with exponential backoff and full
jitter and resubscribes with ``after_seq`` = cursor and the same filters, and it never yields
a seq twice. ``end``, ``deleted`` and errors are yielded as typed items.

    async for item in subscribe("ws://127.0.0.1:8080/v1/ws", "thread-1"):
        if item.type == "event":
            print(item.event["seq"], item.event["content"])
"""

from __future__ import annotations

import asyncio
import inspect
import json
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Awaitable, Callable
from urllib.parse import quote

import websockets
import websockets.exceptions

from runstream._common import DEFAULT_INITIAL_DELAY_S, RunstreamError, backoff_delay

SUBSCRIPTION_ID = "s1"
RETRYABLE_CODES = {"unavailable", "internal", "slow_consumer", "token_expired", "resource_exhausted"}
FATAL_CLOSE_CODES = {1002, 1003, 1007, 1008, 1009, 1010}
CLOSE_TOKEN_EXPIRED = 4001


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


class Subscription:
    """An async iterator of :class:`Item`; ``cursor`` is where it would resume."""

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
        max_delay_s: float = 10.0,
        max_reconnects: int | None = None,
    ):
        if after_seq is not None and live_only:
            raise RunstreamError("invalid_argument", "give at most one of after_seq and live_only")
        self.url = url
        self.thread_id = thread_id
        self.cursor: int | None = after_seq if after_seq is not None else (None if live_only else 0)
        self.run_id = run_id
        self.categories = categories
        self.event_types = event_types
        self.view = view
        self._token = token
        self._get_token = get_token
        self._delays = (initial_delay_s, max_delay_s)
        self._max_reconnects = max_reconnects
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
        while not self._closed:
            progressed = False
            immediate = False
            reason = ""
            resumed_after = self.cursor if self.cursor is not None else -1
            try:
                async with websockets.connect(await self._url(), compression=None, max_size=None) as ws:
                    self._ws = ws
                    await ws.send(json.dumps(self._frame()))
                    close_code: int | None = None
                    try:
                        async for raw in ws:
                            f = json.loads(raw)
                            if f.get("type") == "error" and f.get("id") is None:
                                c = (f.get("cursors") or {}).get(SUBSCRIPTION_ID)
                                if c is not None:
                                    progressed |= self._advance(c)
                                reason = f"{f.get('code')}: {f.get('message')}"
                                continue
                            if f.get("id") != SUBSCRIPTION_ID:
                                continue
                            t = f.get("type")
                            if t == "event":
                                seq = f["event"]["seq"]
                                if self.cursor is not None and seq <= self.cursor:
                                    continue
                                progressed |= self._advance(seq)
                                yield Item("event", event=f["event"], seq=seq)
                            elif t == "chat":
                                if f["seq"] <= resumed_after:
                                    continue
                                progressed |= self._advance(f["seq"])
                                chat = {k: v for k, v in f.items() if k not in ("type", "id")}
                                yield Item("chat", chat=chat, seq=f["seq"])
                            elif t == "live":
                                progressed |= self._advance(f["seq"])
                                yield Item("live", seq=f["seq"])
                            elif t == "end":
                                self._advance(f["seq"])
                                yield Item("end", run_id=f["run_id"], seq=f["seq"], status=f["status"])
                                return
                            elif t == "deleted":
                                yield Item("deleted", thread_id=f["thread_id"], run_id=f.get("run_id"))
                                return
                            elif t == "error":
                                seq = f.get("seq")
                                if seq is not None:
                                    progressed |= self._advance(seq)
                                retrying = seq is not None and f["code"] in RETRYABLE_CODES
                                err = RunstreamError(f["code"], f["message"], seq=seq)
                                yield Item("error", error=err, retrying=retrying)
                                if not retrying:
                                    return
                                reason = str(err)
                                break
                        else:
                            close_code = ws.close_code or 1006
                    except websockets.exceptions.ConnectionClosed as cc:
                        close_code = cc.rcvd.code if cc.rcvd is not None else 1006
                    if self._closed:
                        return
                    if close_code == CLOSE_TOKEN_EXPIRED:
                        if self._get_token is None:
                            yield Item("error", error=RunstreamError("token_expired", reason or "token expired"))
                            return
                        immediate = True
                        progressed = True
                    elif close_code in FATAL_CLOSE_CODES:
                        yield Item("error", error=RunstreamError("invalid_argument", f"closed with {close_code}"))
                        return
                    if close_code is not None:
                        reason = f"connection closed ({close_code}){': ' + reason if reason else ''}"
            except websockets.exceptions.InvalidStatusCode as err:
                status = err.status_code
                if status in (400, 403, 404) or (status == 401 and self._get_token is None):
                    code = {400: "invalid_argument", 401: "unauthenticated", 403: "permission_denied"}.get(status, "not_found")
                    yield Item("error", error=RunstreamError(code, f"upgrade refused with {status}", status=status))
                    return
                reason = f"upgrade refused with {status}"
            except (OSError, asyncio.TimeoutError, websockets.exceptions.WebSocketException) as err:
                if self._closed:
                    return
                reason = f"connection failed: {err!r}"
            finally:
                self._ws = None
            if self._closed:
                return
            if progressed:
                attempt = 0
            if self._max_reconnects is not None and attempt >= self._max_reconnects:
                yield Item("error", error=RunstreamError("connection_failed", f"gave up: {reason}"))
                return
            delay = 0.0 if immediate else backoff_delay(attempt, *self._delays)
            attempt += 1
            self.reconnects += 1
            yield Item("reconnecting", attempt=attempt, delay_s=delay, reason=reason, seq=self.cursor)
            await asyncio.sleep(delay)


def subscribe(url: str, thread_id: str, **kwargs) -> Subscription:
    """Opens a resuming subscription (see :class:`Subscription` for the options)."""
    return Subscription(url, thread_id, **kwargs)
