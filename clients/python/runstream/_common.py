"""Shared vocabulary: errors, backoff, events and their conversion to the wire."""

from __future__ import annotations

import json
import math
import numbers
import random
import secrets
import threading
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from runstream.v1 import runstream_pb2 as pb

# The categories the broker gives a meaning to; any other lower-case identifier
# ([a-z][a-z0-9_]{0,63}) is stored and returned as given.
CATEGORIES = ("message", "trace", "lifecycle")
_CATEGORY_ENUM = {"message": pb.MESSAGE, "trace": pb.TRACE, "lifecycle": pb.LIFECYCLE}
ACK_LEVELS = {"ACCEPTED": pb.ACCEPTED, "PERSISTED": pb.PERSISTED}

DEFAULT_INITIAL_DELAY_S = 0.1
DEFAULT_MAX_DELAY_S = 10.0
# The highest seq the broker takes as a cursor (what a JSON number holds exactly).
MAX_SEQ = 2**53 - 1


class RunstreamError(Exception):
    """An error with the broker's stable short code (``invalid_argument``, ``cursor_ahead``, ...).

    ``event_ids``, on a failed stream ``send``, are the ids its request went with (generated ones
    included): send the events again with them and the broker stores each once.
    """

    def __init__(
        self,
        code: str,
        message: str,
        *,
        status: int | None = None,
        seq: int | None = None,
        event_ids: list[str] | None = None,
    ):
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.status = status
        self.seq = seq
        self.event_ids = event_ids


class OptionChecks:
    """A component's options, checked when it is made: ``done()`` raises one ValueError naming
    every bad one. A NaN compares false with everything, so unchecked it would turn a limit off
    without a word."""

    def __init__(self) -> None:
        self.problems: list[str] = []

    @staticmethod
    def real(value: Any) -> bool:
        return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)

    def count(self, name: str, value: Any, *, minimum: int = 1, maximum: int | None = None) -> int:
        """A whole number (``2.0`` is 2) from ``minimum`` to ``maximum``."""
        if self.real(value) and value == int(value) and minimum <= value and (maximum is None or value <= maximum):
            return int(value)
        bound = f"of at least {minimum}" if maximum is None else f"from {minimum} to {maximum}"
        self.problems.append(f"{name}: must be a whole number {bound} (got {value!r})")
        return minimum

    def seconds(self, name: str, value: Any, *, positive: bool = False) -> float:
        if self.real(value) and (value > 0 if positive else value >= 0):
            return float(value)
        self.problems.append(f"{name}: must be a finite number {'above' if positive else 'of at least'} 0 (got {value!r})")
        return 0.0

    def done(self) -> None:
        if self.problems:
            raise ValueError("; ".join(self.problems))


def backoff_delay(attempt: int, initial: float = DEFAULT_INITIAL_DELAY_S, maximum: float = DEFAULT_MAX_DELAY_S) -> float:
    """Full jitter: uniform in [0, min(maximum, initial * 2**attempt)]."""
    return random.uniform(0, min(maximum, initial * (2 ** min(attempt, 64))))


def new_id_prefix() -> str:
    return f"ev-{secrets.token_hex(6)}"


@dataclass
class Event:
    """One event to publish. ``content`` is any JSON value; ``content_json`` wins when given.

    ``category`` is any lower-case identifier (``message``, ``trace`` and ``lifecycle`` mean
    something to the broker). ``created_at`` goes as text (a ``datetime`` as its ``isoformat()``),
    which the broker returns exactly as given.

    An empty ``event_id`` is given one when the event is handed over (``<prefix>-<n>``). The
    publishers keep it in what they send, retries included, and never write it back into the
    ``Event``: the ack's ``event_id`` carries it, and the same object handed over again (with
    new content) is a new event with a new id.
    """

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
    """Generated event ids, ``<prefix>-<n>``: unique across the threads that publish at once (the
    count is taken under a lock, which a free-threaded Python needs as much as any)."""

    prefix: str = field(default_factory=new_id_prefix)
    n: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def next(self) -> str:
        with self._lock:
            self.n += 1
            n = self.n
        return f"{self.prefix}-{n}"


def parse_time(value: datetime | str) -> datetime:
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=timezone.utc)
    text = value.strip()
    if text.endswith("Z"):
        text = text[:-1] + "+00:00"
    parsed = datetime.fromisoformat(text)
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)


def to_proto(e: Event, ids: _IdSource) -> pb.Event:
    """The wire event, made once when the event is handed over: an empty ``event_id`` gets the
    next generated id here, in the message only, and every retry resends that message. The
    caller's ``Event`` is never changed, so handing the same object over again is a new event."""
    msg = pb.Event(
        thread_id=e.thread_id,
        run_id=e.run_id,
        event_type=e.event_type,
        # By name, any category; the enum too for the three known ones.
        category=_CATEGORY_ENUM.get(e.category, pb.CATEGORY_UNSPECIFIED),
        category_name=e.category,
        content_json=e.content_json if e.content_json is not None else json.dumps(e.content, ensure_ascii=False),
        metadata_json="" if e.metadata is None else json.dumps(e.metadata, ensure_ascii=False),
        event_id=e.event_id or ids.next(),
        user_id=e.user_id or "",
    )
    if e.created_at is not None:
        # As text, which the broker keeps and returns exactly (a str as given, a datetime's isoformat()).
        msg.created_at_text = e.created_at if isinstance(e.created_at, str) else e.created_at.isoformat()
    return msg


def ack_of(a: pb.EventAck) -> Ack:
    return Ack(event_id=a.event_id, duplicate=a.duplicate, seq=a.seq, offset=a.offset, rejected=a.rejected)


def cancel_of(c: pb.CancelRun) -> Cancel:
    return Cancel(
        thread_id=c.thread_id, run_id=c.run_id, reason=c.reason, event_id=c.event_id, requested_by=c.requested_by
    )
