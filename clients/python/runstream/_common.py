"""Shared vocabulary: errors, backoff, events and their conversion to the wire."""

from __future__ import annotations

import json
import random
import secrets
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from runstream.v1 import runstream_pb2 as pb

CATEGORIES = ("message", "trace", "lifecycle")
_CATEGORY_ENUM = {"message": pb.MESSAGE, "trace": pb.TRACE, "lifecycle": pb.LIFECYCLE}
ACK_LEVELS = {"ACCEPTED": pb.ACCEPTED, "PERSISTED": pb.PERSISTED}

DEFAULT_INITIAL_DELAY_S = 0.1
DEFAULT_MAX_DELAY_S = 10.0


class RunstreamError(Exception):
    """An error with the broker's stable short code (``invalid_argument``, ``cursor_ahead``, ...)."""

    def __init__(self, code: str, message: str, *, status: int | None = None, seq: int | None = None):
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.status = status
        self.seq = seq


def backoff_delay(attempt: int, initial: float = DEFAULT_INITIAL_DELAY_S, maximum: float = DEFAULT_MAX_DELAY_S) -> float:
    """Full jitter: uniform in [0, min(maximum, initial * 2**attempt)]."""
    return random.uniform(0, min(maximum, initial * (2 ** min(attempt, 64))))


def new_id_prefix() -> str:
    return f"ev-{secrets.token_hex(6)}"


@dataclass
class Event:
    """One event to publish. ``content`` is any JSON value; ``content_json`` wins when given."""

    thread_id: str
    run_id: str
    event_type: str
    category: str
    content: Any = None
    metadata: dict | None = None
    event_id: str = ""
    created_at: datetime | str | None = None
    user_id: str = ""
    content_json: str | None = None


@dataclass
class Ack:
    event_id: str
    duplicate: bool
    seq: int
    offset: int
    rejected: str = ""


@dataclass
class Cancel:
    """A cancel control: a subscriber asked the run's producer to stop."""

    thread_id: str
    run_id: str
    reason: str
    event_id: str
    requested_by: str


@dataclass
class _IdSource:
    prefix: str = field(default_factory=new_id_prefix)
    n: int = 0

    def next(self) -> str:
        self.n += 1
        return f"{self.prefix}-{self.n}"


def parse_time(value: datetime | str) -> datetime:
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=timezone.utc)
    text = value.strip()
    if text.endswith("Z"):
        text = text[:-1] + "+00:00"
    parsed = datetime.fromisoformat(text)
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)


def to_proto(e: Event, ids: _IdSource) -> pb.Event:
    """The wire event. An empty ``event_id`` is filled in here, once, so retries reuse it."""
    if e.category not in _CATEGORY_ENUM:
        raise RunstreamError(
            "invalid_argument",
            f"category: {e.category!r} is not one of {', '.join(CATEGORIES)}",
        )
    if not e.event_id:
        e.event_id = ids.next()
    msg = pb.Event(
        thread_id=e.thread_id,
        run_id=e.run_id,
        event_type=e.event_type,
        category=_CATEGORY_ENUM[e.category],
        content_json=e.content_json if e.content_json is not None else json.dumps(e.content, ensure_ascii=False),
        metadata_json="" if e.metadata is None else json.dumps(e.metadata, ensure_ascii=False),
        event_id=e.event_id,
        user_id=e.user_id or "",
    )
    if e.created_at is not None:
        ms = int(parse_time(e.created_at).timestamp() * 1000)
        msg.created_at.seconds = ms // 1000
        msg.created_at.nanos = (ms % 1000) * 1_000_000
    return msg


def ack_of(a: pb.EventAck) -> Ack:
    return Ack(event_id=a.event_id, duplicate=a.duplicate, seq=a.seq, offset=a.offset, rejected=a.rejected)


def cancel_of(c: pb.CancelRun) -> Cancel:
    return Cancel(
        thread_id=c.thread_id, run_id=c.run_id, reason=c.reason, event_id=c.event_id, requested_by=c.requested_by
    )
