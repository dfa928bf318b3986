"""A drop-in DeerFlow ``RunEventStore`` backed by runstream.

    from runstream.deerflow import RunstreamEventStore
    store = RunstreamEventStore(grpc_target="127.0.0.1:50051", http_url="http://127.0.0.1:8080")

Writes go over gRPC at ``PERSISTED`` (so ``put`` returns the record with its seq); reads and
deletes go to the History API. Lists are ascending by seq with DeerFlow's paging: no cursor →
the latest ``limit``; ``before_seq`` → the last ``limit`` below it; ``after_seq`` → the first
``limit`` above it; both bounds exclusive. Pages the broker cuts short (by bytes, or its 1000
limit) are followed until ``limit`` records are collected; a page that says ``has_more`` without
moving its cursor ends the call with ``internal`` rather than being asked for again forever.

Categories are an open set, as in DeerFlow (only ``message`` counts as a message), and a
``created_at`` comes back exactly as given: the broker stores both as sent. See docs/clients.md.
"""

from __future__ import annotations

import hashlib
from datetime import datetime, timezone
from typing import Any

from runstream._common import Event, RunstreamError
from runstream.history import MAX_LIMIT, MAX_SEQ, AsyncHistoryClient, next_cursor
from runstream.publisher import AsyncPublisher

try:  # Inherit DeerFlow's interface (and its default methods) when DeerFlow is installed.
    from deerflow.runtime.events.store.base import RunEventStore as _Base  # type: ignore
except ImportError:  # pragma: no cover - DeerFlow is optional
    _Base = object  # type: ignore[assignment,misc]

try:
    from deerflow.runtime.user_context import AUTO  # type: ignore
except ImportError:

    class _Auto:
        def __repr__(self) -> str:
            return "AUTO"

    AUTO = _Auto()

DEFAULT_MESSAGES_LIMIT = 50
DEFAULT_EVENTS_LIMIT = 500
AI_MESSAGE_TYPES = ("llm.ai.response", "ai_message")
LOOKUP_PAGE = 1000


def _user(user_id: Any) -> str | None:
    """DeerFlow's ``user_id`` argument: a string filters; ``None`` or ``AUTO`` does not."""
    return user_id if isinstance(user_id, str) and user_id else None


def _record(e: dict) -> dict:
    """A runstream event as DeerFlow's RunEvent dict."""
    return {
        "thread_id": e["thread_id"],
        "run_id": e["run_id"],
        "event_type": e["event_type"],
        "category": e["category"],
        "content": e["content"],
        "metadata": e["metadata"],
        "seq": e["seq"],
        "created_at": e["created_at"],
    }


def _once_id(run_id: str, event_type: str) -> str:
    """put_if_absent's event id: one per (run, event type), so the broker's (thread, event_id)
    uniqueness serialises the check with every other writer of the thread."""
    return "once-" + hashlib.sha256(f"{run_id}\0{event_type}".encode()).hexdigest()[:40]


class RunstreamEventStore(_Base):  # type: ignore[misc,valid-type]
    """DeerFlow's RunEventStore on runstream (every method of DeerFlow's current base class)."""

    def __init__(self, grpc_target: str = "127.0.0.1:50051", http_url: str = "http://127.0.0.1:8080", token: str | None = None):
        self._publisher = AsyncPublisher(grpc_target, token=token, ack="PERSISTED", linger_ms=1)
        self._history = AsyncHistoryClient(http_url, token=token)

    async def close(self) -> None:
        await self._publisher.close()

    # ---- writes ---------------------------------------------------------------------------

    def _event(self, d: dict, event_id: str = "") -> Event:
        created_at = d.get("created_at")
        return Event(
            thread_id=d["thread_id"],
            run_id=d["run_id"],
            event_type=d["event_type"],
            category=d["category"],
            content=d.get("content", ""),
            metadata=d.get("metadata") or {},
            event_id=event_id,
            created_at=created_at,
        )

    @staticmethod
    def _stored(d: dict, seq: int, created_at: str | None) -> dict:
        return {
            "thread_id": d["thread_id"],
            "run_id": d["run_id"],
            "event_type": d["event_type"],
            "category": d["category"],
            "content": d.get("content", ""),
            "metadata": d.get("metadata") or {},
            "seq": seq,
            "created_at": created_at,
        }

    async def put(
        self,
        *,
        thread_id: str,
        run_id: str,
        event_type: str,
        category: str,
        content: str | dict = "",
        metadata: dict | None = None,
        created_at: str | None = None,
    ) -> dict:
        return (
            await self.put_batch(
                [
                    {
                        "thread_id": thread_id,
                        "run_id": run_id,
                        "event_type": event_type,
                        "category": category,
                        "content": content,
                        "metadata": metadata,
                        "created_at": created_at,
                    }
                ]
            )
        )[0]

    async def put_batch(self, events: list[dict]) -> list[dict]:
        if not events:
            return []
        now = datetime.now(timezone.utc).isoformat()
        stamped = [{**d, "created_at": d.get("created_at") or now} for d in events]
        acks = await self._publisher.publish_batch([self._event(d) for d in stamped])
        for a in acks:
            if a.rejected:
                raise RunstreamError("invalid_argument", f"the store refused event {a.event_id}: {a.rejected}")
        return [self._stored(d, a.seq, d["created_at"]) for d, a in zip(stamped, acks)]

    async def put_if_absent(
        self,
        *,
        thread_id: str,
        run_id: str,
        event_type: str,
        category: str,
        content: str | dict = "",
        metadata: dict | None = None,
        created_at: str | None = None,
    ) -> tuple[dict, bool]:
        existing = await self._first_of_type(thread_id, run_id, event_type)
        if existing is not None:
            return existing, False
        d = {
            "thread_id": thread_id,
            "run_id": run_id,
            "event_type": event_type,
            "category": category,
            "content": content,
            "metadata": metadata,
            "created_at": created_at or datetime.now(timezone.utc).isoformat(),
        }
        [ack] = await self._publisher.publish_batch([self._event(d, _once_id(run_id, event_type))])
        if ack.duplicate:
            stored = await self._first_of_type(thread_id, run_id, event_type)
            if stored is not None:
                return stored, False
        return self._stored(d, ack.seq, d["created_at"]), True

    async def _first_of_type(self, thread_id: str, run_id: str, event_type: str) -> dict | None:
        page = await self._history.list_events(thread_id, run_id=run_id, event_types=[event_type], limit=1)
        return _record(page["events"][0]) if page["events"] else None

    # ---- reads ----------------------------------------------------------------------------

    async def _page(
        self,
        thread_id: str,
        *,
        limit: int,
        before_seq: int | None,
        after_seq: int | None,
        keep=None,
        **filters,
    ) -> list[dict]:
        """DeerFlow's paging on History's pages: ascending from after_seq, else the last `limit`."""
        if limit <= 0:
            return []
        out: list[dict] = []
        if after_seq is not None:
            cursor = after_seq
            while len(out) < limit:
                page = await self._history.list_events(
                    thread_id, after_seq=cursor, limit=min(MAX_LIMIT, max(limit - len(out), 1)), **filters
                )
                nxt = next_cursor(page, cursor, ascending=True)
                for e in page["events"]:
                    if before_seq is not None and e["seq"] >= before_seq:
                        return out
                    if keep is None or keep(e):
                        out.append(_record(e))
                        if len(out) == limit:
                            return out
                if nxt is None:
                    break
                cursor = nxt
            return out
        cursor = before_seq if before_seq is not None else MAX_SEQ
        while len(out) < limit:
            page = await self._history.list_events(
                thread_id, before_seq=cursor, limit=min(MAX_LIMIT, max(limit - len(out), 1)), **filters
            )
            nxt = next_cursor(page, cursor, ascending=False)
            for e in page["events"]:
                if keep is None or keep(e):
                    out.append(_record(e))
                    if len(out) == limit:
                        break
            if nxt is None:
                break
            cursor = nxt
        out.reverse()
        return out

    async def list_messages(
        self,
        thread_id: str,
        *,
        limit: int = DEFAULT_MESSAGES_LIMIT,
        before_seq: int | None = None,
        after_seq: int | None = None,
        user_id: Any = AUTO,
    ) -> list[dict]:
        return await self._page(
            thread_id,
            limit=limit,
            before_seq=before_seq,
            after_seq=after_seq,
            categories=["message"],
            user_id=_user(user_id),
        )

    async def list_events(
        self,
        thread_id: str,
        run_id: str,
        *,
        event_types: list[str] | None = None,
        task_id: str | None = None,
        limit: int = DEFAULT_EVENTS_LIMIT,
        after_seq: int | None = None,
    ) -> list[dict]:
        # History filters on metadata.task_id; it refuses an empty one, which only the client can match.
        keep = (lambda e: (e.get("metadata") or {}).get("task_id") == "") if task_id == "" else None
        return await self._page(
            thread_id,
            limit=limit,
            before_seq=None,
            after_seq=after_seq if after_seq is not None else 0,
            keep=keep,
            run_id=run_id,
            event_types=list(event_types) if event_types else None,
            task_id=task_id or None,
        )

    async def list_messages_by_run(
        self,
        thread_id: str,
        run_id: str,
        *,
        limit: int = DEFAULT_MESSAGES_LIMIT,
        before_seq: int | None = None,
        after_seq: int | None = None,
    ) -> list[dict]:
        return await self._page(
            thread_id,
            limit=limit,
            before_seq=before_seq,
            after_seq=after_seq,
            run_id=run_id,
            categories=["message"],
        )

    async def get_last_visible_ai_seq_by_run(self, thread_id: str, run_ids: set[str], *, user_id: Any = AUTO) -> dict[str, int]:
        result: dict[str, int] = {}
        for run_id in run_ids:
            cursor = MAX_SEQ
            while True:
                page = await self._history.list_events(
                    thread_id,
                    run_id=run_id,
                    categories=["message"],
                    event_types=list(AI_MESSAGE_TYPES),
                    before_seq=cursor,
                    limit=100,
                    user_id=_user(user_id),
                )
                nxt = next_cursor(page, cursor, ascending=False)
                hit = next(
                    (
                        e["seq"]
                        for e in page["events"]
                        if not str((e.get("metadata") or {}).get("caller", "")).startswith("middleware:")
                    ),
                    None,
                )
                if hit is not None:
                    result[run_id] = hit
                    break
                if nxt is None:
                    break
                cursor = nxt
        return result

    async def find_latest_ai_message_run_ids(
        self, thread_id: str, message_ids: set[str], *, user_id: Any = AUTO
    ) -> dict[str, str]:
        pending = {m for m in message_ids if isinstance(m, str) and m}
        result: dict[str, str] = {}
        cursor = MAX_SEQ
        while pending:
            page = await self._history.list_events(
                thread_id, categories=["message"], before_seq=cursor, limit=LOOKUP_PAGE, user_id=_user(user_id)
            )
            nxt = next_cursor(page, cursor, ascending=False)
            for e in page["events"]:
                content = e.get("content")
                if not isinstance(content, dict) or content.get("type") != "ai" or not e.get("run_id"):
                    continue
                mid = content.get("id")
                if mid in pending:
                    result[mid] = e["run_id"]
                    pending.discard(mid)
            if nxt is None:
                break
            cursor = nxt
        return result

    async def count_messages(self, thread_id: str) -> int:
        return await self._history.count_messages(thread_id)

    # ---- deletes --------------------------------------------------------------------------

    async def delete_by_thread(self, thread_id: str, *, user_id: Any = AUTO) -> int:
        return int((await self._history.delete_thread(thread_id, user_id=_user(user_id)))["deleted_events"])

    async def delete_by_run(self, thread_id: str, run_id: str, *, user_id: Any = AUTO) -> int:
        return int((await self._history.delete_run(thread_id, run_id, user_id=_user(user_id)))["deleted_events"])
