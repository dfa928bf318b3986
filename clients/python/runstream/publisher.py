"""Publishers over gRPC ``runstream.v1.Ingest``: sync (a worker thread) and asyncio (``grpc.aio``).

Both batch: the events waiting when a request can go (those handed over while the previous one
was out) go together, at most ``max_batch_events`` per request, in the order they were handed
over (one request at a time, so every thread's seq order is publish order). No timer holds an
event back unless ``linger_ms`` (default 0) asks an event to wait that long for others. Every
event's ``event_id`` is fixed before its first send, and a failed request is resent with the
same ids, so a retry is never stored twice. A refusal naming one event of a batch (``events[i].…``)
fails that event alone (with those of the same value when the field is judged by value, as ``run_id``),
and the rest are sent again (the broker stored nothing of a refused request). A request takes the
events that fit ``max_request_bytes`` (the broker's ``RS_MAX_GRPC_MESSAGE_BYTES``) together, and an
event too large for any request is refused when handed over. ``open_stream`` gives a ``PublishStream`` call that hands the broker's
cancel controls to a callback and matches acks to requests around them. When the broker refuses
a request of a stream, that request fails with the refusal, and those sent after it, which may
have been stored, fail with ``unavailable`` and their ``event_ids``, to be sent again on a new stream.

A generated ``event_id`` lives in what is sent, never in the caller's ``Event``. Every option is
checked when a publisher is made (``ValueError`` naming each bad one).
"""

from __future__ import annotations

import asyncio
import queue
import re
import threading
import time
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass
from typing import Callable, Iterable

import grpc
import grpc.aio

from runstream._common import (
    ACK_LEVELS,
    Ack,
    Cancel,
    Event,
    OptionChecks,
    RunstreamError,
    _IdSource,
    ack_of,
    backoff_delay,
    cancel_of,
    to_proto,
)
from runstream.v1 import runstream_pb2 as pb

PUBLISH = "/runstream.v1.Ingest/Publish"
PUBLISH_STREAM = "/runstream.v1.Ingest/PublishStream"

DEFAULT_LINGER_MS = 0
DEFAULT_MAX_BATCH_EVENTS = 500
DEFAULT_MAX_ATTEMPTS = 20
DEFAULT_TIMEOUT_S = 60.0
DEFAULT_MAX_REQUEST_BYTES = 16 * 1024 * 1024
# What a request carries besides the events: the ack level, framing.
_REQUEST_ENVELOPE_BYTES = 64
# What an event takes in a request besides its own bytes: its field tag and length.
_EVENT_FRAMING_BYTES = 6

RETRYABLE = {
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.DEADLINE_EXCEEDED,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
    grpc.StatusCode.ABORTED,
    grpc.StatusCode.INTERNAL,
    grpc.StatusCode.UNKNOWN,
}

_MAX_SEND_BYTES = 64 * 1024 * 1024
_CHANNEL_OPTIONS = [("grpc.enable_http_proxy", 0), ("grpc.max_send_message_length", _MAX_SEND_BYTES)]
# The fields the broker judges by their value alone (and the token): a refusal about one of them
# awaits every event with the same value.
_VALUE_CHECKED = {"thread_id", "run_id", "user_id", "event_type", "category_name", "content_json", "metadata_json", "created_at_text"}


# A request over a gRPC size limit, in gRPC's words: sending it again cannot succeed.
_TOO_LARGE = re.compile(r"larger than max \(\d+ vs\.? \d+\)")
# A refusal naming one event of a request: ``events[i].<field>: …`` or ``events[i]: …`` (after
# ``request <n>: `` on a stream).
_REFUSED_EVENT = re.compile(r"^(?:request \d+: )?events\[(\d+)\](\.|(?=: ))")
# A stream's error about one of its requests, counted from 0 on that stream: ``request <n>: …``.
_REQUEST_N = re.compile(r"^request (\d+): ")
_FIELD = re.compile(r"\w+")

OnRetry = Callable[[RunstreamError, int, float], None]


def _retryable(err: grpc.RpcError) -> bool:
    code = err.code()
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED and _TOO_LARGE.search(err.details() or ""):
        return False
    return code in RETRYABLE


def _refused(err: Exception, msgs: list[pb.Event]) -> set[int] | None:
    """The events of a request that a refusal is about, when it names one: that one, and when the
    field is judged by its value alone (``_VALUE_CHECKED``), every event with the same value."""
    if not isinstance(err, RunstreamError) or err.code not in ("invalid_argument", "permission_denied"):
        return None
    m = _REFUSED_EVENT.match(err.message)
    i = int(m.group(1)) if m else len(msgs)
    if i >= len(msgs):
        return None
    field = _FIELD.match(err.message, m.end()) if m.group(2) == "." else None
    name = field.group(0) if field else ""
    if name not in _VALUE_CHECKED:
        return {i}
    value = getattr(msgs[i], name)
    return {j for j, msg in enumerate(msgs) if getattr(msg, name) == value}


def _alone(err: RunstreamError) -> RunstreamError:
    """A refusal naming an event of a request, as that event's own error: ``<field>: …``, or
    ``event: …`` when it names no field."""
    return RunstreamError(err.code, _REFUSED_EVENT.sub(lambda m: "" if m.group(2) == "." else "event", err.message, count=1))


def _sized(event: Event, ids: _IdSource, max_bytes: int) -> tuple[pb.Event, int]:
    """The event as protobuf and the bytes it takes in a request; refused when no request can carry it."""
    msg = to_proto(event, ids)
    wire = msg.ByteSize() + _EVENT_FRAMING_BYTES
    if wire + _REQUEST_ENVELOPE_BYTES > max_bytes:
        field = "content_json" if len(msg.content_json) >= len(msg.metadata_json) else "metadata_json"
        raise RunstreamError(
            "invalid_argument",
            f"{field}: the event is {wire + _REQUEST_ENVELOPE_BYTES} bytes, more than a request of the "
            f"broker may be (max_request_bytes={max_bytes})",
        )
    return msg, wire


def _protos(events: list[Event], ids: _IdSource, max_bytes: int) -> list[pb.Event]:
    """The events of one request as the caller formed it; refused when they cannot fit it together."""
    sized = [_sized(e, ids, max_bytes) for e in events]
    size = sum(wire for _, wire in sized) + _REQUEST_ENVELOPE_BYTES
    if size > max_bytes:
        raise RunstreamError(
            "invalid_argument",
            f"events: the request takes {size} bytes, more than a request of the broker may be "
            f"(max_request_bytes={max_bytes}); send fewer events in it",
        )
    return [msg for msg, _ in sized]


def _answer(fut, result=None, error: BaseException | None = None) -> None:
    """Settles a caller's future, unless the caller cancelled it (then nobody is waiting)."""
    try:
        if error is None:
            fut.set_result(result)
        else:
            fut.set_exception(error)
    except (InvalidStateError, asyncio.InvalidStateError):
        pass


def _settle(events: list, outcome: list[Ack] | Exception) -> bool:
    """Answers the waiters of one request's ``outcome``. False when the broker refused some events
    of ``events`` by name: those are answered and taken out, and the rest must go again."""
    if not isinstance(outcome, Exception):
        for k, (_, f) in enumerate(events):
            if k < len(outcome):
                _answer(f, outcome[k])
            else:
                _answer(f, error=RunstreamError("internal", "the broker answered with fewer acks than events"))
        return True
    refused = _refused(outcome, [m for m, _ in events])
    if refused is None:
        for _, f in events:
            _answer(f, error=outcome)
        return True
    alone = _alone(outcome)
    for i in refused:
        _answer(events[i][1], error=alone)
    events[:] = [e for i, e in enumerate(events) if i not in refused]
    return not events


def _stream_ended(
    waiting: list[tuple[int, list[str], "Future | asyncio.Future"]], ended: RunstreamError
) -> tuple[list[tuple["Future | asyncio.Future", RunstreamError]], RunstreamError]:
    """What the requests a stream's end left unanswered fail with, and what later sends hear.

    When the broker's error is about one request (``request <n>: …``), that request fails with
    it. The others sent had no answer, and may have been stored all the same (the broker issues
    pipelined requests before it learns that an earlier one failed: protocol §3). They fail with
    ``unavailable``, as any request that may or may not have been stored does, and send again
    safely with the same ids (``event_ids``) on a new stream. A later send was never sent: it
    fails with ``closed``. Any other end fails every request with its own error."""
    m = _REQUEST_N.match(ended.message)
    refused = int(m.group(1)) if m else None
    answers = []
    for n, ids, fut in waiting:
        if refused is None or n == refused:
            err = RunstreamError(ended.code, ended.message, event_ids=ids)
        else:
            err = RunstreamError(
                "unavailable",
                f"request {n}: no answer (the stream ended at request {refused}'s {ended.code}); it may "
                "have been stored: send it again with the same event_ids (RunstreamError.event_ids) "
                "on a new stream",
                event_ids=ids,
            )
        answers.append((fut, err))
    if refused is None:
        return answers, ended
    return answers, RunstreamError(
        "closed", f"the stream ended at request {refused}'s {ended.code}; this request was not sent: send it on a new stream"
    )


_ID_PREFIX = re.compile(r"^[A-Za-z0-9_-]{1,100}$")


@dataclass(frozen=True)
class _Options:
    linger_s: float
    max_batch: int
    max_attempts: int
    delays: tuple[float, float]
    timeout_s: float | None
    max_queued: int
    max_request_bytes: int


def _options(
    *,
    ack: str,
    linger_ms: float,
    max_batch_events: int,
    max_attempts: int,
    initial_delay_s: float,
    max_delay_s: float,
    timeout_s: float | None,
    max_queued: int,
    max_request_bytes: int,
    id_prefix: str | None,
) -> _Options:
    """The publishers' options, checked when one is made; a ValueError names every bad one."""
    check = OptionChecks()
    checked = _Options(
        linger_s=check.seconds("linger_ms", linger_ms) / 1000,
        max_batch=check.count("max_batch_events", max_batch_events),
        max_attempts=check.count("max_attempts", max_attempts),
        delays=(check.seconds("initial_delay_s", initial_delay_s), check.seconds("max_delay_s", max_delay_s)),
        timeout_s=None if timeout_s is None else check.seconds("timeout_s", timeout_s, positive=True),
        max_queued=check.count("max_queued", max_queued),
        max_request_bytes=min(check.count("max_request_bytes", max_request_bytes), _MAX_SEND_BYTES),
    )
    if ack not in ACK_LEVELS:
        check.problems.append(f"ack: must be ACCEPTED or PERSISTED (got {ack!r})")
    if id_prefix is not None and not (isinstance(id_prefix, str) and _ID_PREFIX.match(id_prefix)):
        check.problems.append(f"id_prefix: must match [A-Za-z0-9_-]{{1,100}} (got {id_prefix!r})")
    check.done()
    return checked


def _error(err: grpc.RpcError) -> RunstreamError:
    code = err.code()
    return RunstreamError(code.name.lower() if code else "unknown", err.details() or str(err))


def _metadata(token: str | None) -> tuple:
    return (("authorization", f"Bearer {token}"),) if token else ()


def _request(events: list[pb.Event], ack: str) -> pb.PublishRequest:
    if ack not in ACK_LEVELS:
        raise RunstreamError("invalid_argument", f"ack: must be ACCEPTED or PERSISTED (got {ack!r})")
    return pb.PublishRequest(events=events, ack=ACK_LEVELS[ack])


class Publisher:
    """A synchronous, batching, retrying publisher. ``publish`` returns a Future of the ack.

    The options are checked here: ``ValueError`` names each bad one (counts are whole numbers of
    at least 1, times finite and not negative, ``timeout_s`` above 0 or None for no deadline).
    The futures' done-callbacks run on the publisher's worker thread: ``publish`` from one never
    blocks (it may go past ``max_queued``), and ``publish_many``, ``flush`` and ``close``, which
    would wait for that thread, raise ``RuntimeError`` there."""

    def __init__(
        self,
        target: str,
        *,
        token: str | None = None,
        ack: str = "ACCEPTED",
        linger_ms: float = DEFAULT_LINGER_MS,
        max_batch_events: int = DEFAULT_MAX_BATCH_EVENTS,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        initial_delay_s: float = 0.1,
        max_delay_s: float = 5.0,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        max_queued: int = 10_000,
        id_prefix: str | None = None,
        max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
        on_retry: OnRetry | None = None,
        credentials: grpc.ChannelCredentials | None = None,
    ):
        o = _options(
            ack=ack,
            linger_ms=linger_ms,
            max_batch_events=max_batch_events,
            max_attempts=max_attempts,
            initial_delay_s=initial_delay_s,
            max_delay_s=max_delay_s,
            timeout_s=timeout_s,
            max_queued=max_queued,
            max_request_bytes=max_request_bytes,
            id_prefix=id_prefix,
        )
        # Plaintext, as the broker serves gRPC; behind a TLS-terminating proxy, credentials
        # (grpc.ssl_channel_credentials()) make it a TLS channel.
        self._channel = (
            grpc.insecure_channel(target, options=_CHANNEL_OPTIONS)
            if credentials is None
            else grpc.secure_channel(target, credentials, options=_CHANNEL_OPTIONS)
        )
        self._publish = self._channel.unary_unary(
            PUBLISH, request_serializer=pb.PublishRequest.SerializeToString, response_deserializer=pb.PublishResponse.FromString
        )
        self._token = token
        self.ack = ack
        self._linger_s = o.linger_s
        self._max_batch = o.max_batch
        self._max_attempts = o.max_attempts
        self._delays = o.delays
        self._timeout_s = o.timeout_s
        self._ids = _IdSource(id_prefix) if id_prefix else _IdSource()
        self._max_request_bytes = o.max_request_bytes
        self._on_retry = on_retry
        # (msg, wire bytes, future, holds room), a flush's (None, 0, future, False), or close()'s None.
        self._queue: queue.Queue = queue.Queue()
        # Room for max_queued events (backpressure): publish() takes one, blocking while none is
        # left, and the worker gives it back when it takes the event out of the queue.
        self._room = threading.Semaphore(o.max_queued)
        self._closed = False
        # Held while checking _closed and queueing, so nothing is queued behind close()'s stop marker.
        self._lock = threading.Lock()
        # publish_batch() calls in flight: close() waits for them before it closes the channel.
        self._batches = 0
        self._no_batches = threading.Condition(self._lock)
        self._worker = threading.Thread(target=self._run, name="runstream-publisher", daemon=True)
        self._worker.start()

    def publish(self, event: Event) -> "Future[Ack]":
        """Queues one event, blocking while ``max_queued`` wait; the Future resolves with its ack.

        On the publisher's worker thread, where the futures' done-callbacks run, it never blocks:
        the worker cannot make room while it waits, so the event is queued past ``max_queued``."""
        msg, wire = _sized(event, self._ids, self._max_request_bytes)
        fut: Future = Future()
        room = not self._on_worker()
        if self._closed:
            raise RunstreamError("closed", "the publisher is closed")
        if room:
            self._room.acquire()  # the worker gives room back until it ends, also after close()
        with self._lock:
            if self._closed:
                if room:
                    self._room.release()
                raise RunstreamError("closed", "the publisher is closed")
            self._queue.put((msg, wire, fut, room))
        return fut

    def publish_many(self, events: Iterable[Event], timeout: float | None = None) -> list[Ack]:
        """Publishes events and waits for their acks, in order. Not on the worker thread (from a
        done-callback): it would wait for that thread itself, so it raises ``RuntimeError``."""
        self._not_on_worker("publish_many()")
        futures = [self.publish(e) for e in events]
        return [f.result(timeout) for f in futures]

    def _on_worker(self) -> bool:
        return threading.current_thread() is self._worker

    def _not_on_worker(self, what: str) -> None:
        if self._on_worker():
            raise RuntimeError(
                f"{what} was called on the publisher's worker thread (from a future's done-callback), "
                "where it would wait for that thread itself; call it from another thread"
            )

    def publish_batch(self, events: list[Event], ack: str | None = None) -> list[Ack]:
        """One request now, bypassing the linger; retried with the same ids. A refusal fails it whole."""
        msgs = _protos(events, self._ids, self._max_request_bytes)
        with self._lock:
            if self._closed:
                raise RunstreamError("closed", "the publisher is closed")
            self._batches += 1
        try:
            return self._deliver(msgs, ack or self.ack)
        finally:
            with self._lock:
                self._batches -= 1
                self._no_batches.notify_all()

    def flush(self) -> None:
        """Waits until everything published so far is acknowledged or failed. Not on the worker
        thread (from a done-callback): it would wait for that thread itself (``RuntimeError``)."""
        self._not_on_worker("flush()")
        fut: Future = Future()
        with self._lock:
            if not self._closed:
                self._queue.put((None, 0, fut, False))
        if self._closed:
            self._worker.join()  # closing answers everything, then the worker ends
        else:
            fut.result()

    def close(self) -> None:
        """Refuses new events, answers every one published before, then closes. Idempotent: a
        second call waits for the first. Not on the worker thread (from a done-callback), which it
        would wait for (``RuntimeError``, and the publisher stays open)."""
        self._not_on_worker("close()")
        with self._lock:
            first = not self._closed
            self._closed = True
            if first:
                self._queue.put(None)  # behind every event queued: nothing can come after it
        self._worker.join()
        with self._lock:
            self._no_batches.wait_for(lambda: self._batches == 0)
        if first:
            self._channel.close()

    def __enter__(self) -> "Publisher":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _deliver(self, msgs: list[pb.Event], ack: str) -> list[Ack]:
        req = _request(msgs, ack)
        for attempt in range(self._max_attempts):
            try:
                res = self._publish(req, timeout=self._timeout_s, metadata=_metadata(self._token))
                return [ack_of(a) for a in res.acks]
            except grpc.RpcError as err:
                if not _retryable(err) or attempt + 1 >= self._max_attempts:
                    raise _error(err) from None
                delay = backoff_delay(attempt, *self._delays)
                if self._on_retry:
                    self._on_retry(_error(err), attempt + 1, delay)
                time.sleep(delay)
        raise RunstreamError("unavailable", "out of attempts")

    def _take(self, timeout: float | None = None):
        """The next item of the queue, waiting at most ``timeout`` (None: for ever; 0: not at
        all; queue.Empty past it). The room an event held is given back."""
        item = self._queue.get_nowait() if timeout == 0 else self._queue.get(timeout=timeout)
        if item is not None and item[3]:
            self._room.release()
        return item

    def _run(self) -> None:
        carry = None  # an event that did not fit the previous request: it starts the next
        while True:
            item, carry = (carry, None) if carry is not None else (self._take(), None)
            if item is None:
                return
            batch = [item]
            size = item[1]
            stop = False
            deadline = time.monotonic() + self._linger_s
            while len(batch) < self._max_batch and batch[-1][0] is not None:
                remaining = deadline - time.monotonic()
                try:
                    nxt = self._take(max(0.0, remaining))
                except queue.Empty:
                    break
                if nxt is None:
                    stop = True  # the last item: close() queues nothing after it
                    break
                size += nxt[1]
                if size > self._max_request_bytes - _REQUEST_ENVELOPE_BYTES:
                    carry = nxt
                    break
                batch.append(nxt)
            events = [(m, f) for m, _, f, _ in batch if m is not None]
            while events:
                try:
                    outcome = self._deliver([m for m, _ in events], self.ack)
                except Exception as err:  # noqa: BLE001 - every waiter hears why
                    outcome = err
                if _settle(events, outcome):
                    break
            for m, _, f, _ in batch:
                if m is None:
                    _answer(f)
            if stop:
                return

    def open_stream(self, on_cancel: Callable[[Cancel], None] | None = None) -> "PublishStream":
        return PublishStream(self._channel, self._token, on_cancel, self._ids, self.ack, self._max_request_bytes)


class PublishStream:
    """A ``PublishStream`` call: ``send`` returns the acks of its request; cancels go to ``on_cancel``.

    A request the broker refuses fails with the refusal; the ones sent after it fail with
    ``unavailable`` (they may have been stored; ``event_ids`` to send them again on a new
    stream), and later sends with ``closed``."""

    def __init__(self, channel, token, on_cancel, ids: _IdSource, ack: str, max_request_bytes: int):
        call = channel.stream_stream(
            PUBLISH_STREAM,
            request_serializer=pb.PublishRequest.SerializeToString,
            response_deserializer=pb.PublishResponse.FromString,
        )
        self._requests: queue.Queue = queue.Queue()
        # (the request's number on the stream, its event ids, its caller's future), in send order.
        self._waiting: list[tuple[int, list[str], Future]] = []
        self._sent = 0
        self._lock = threading.Lock()
        self._ids = ids
        self.ack = ack
        self._max_request_bytes = max_request_bytes
        self.on_cancel = on_cancel
        self.cancels: list[Cancel] = []
        # Why the call ended, once it has: later sends fail with it at once.
        self._ended: RunstreamError | None = None
        self._call = call(iter(self._requests.get, None), metadata=_metadata(token))
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def send(self, events: list[Event], timeout: float | None = None) -> list[Ack]:
        """Sends one request and waits for its acks. Not from ``on_cancel``, which runs on the
        thread that reads the answers: it would wait for itself, so it raises ``RuntimeError``."""
        if threading.current_thread() is self._reader:
            raise RuntimeError(
                "send() was called on the stream's reader thread (from on_cancel), where it would wait "
                "for its own answer; send from another thread"
            )
        fut: Future = Future()
        req = _request(_protos(events, self._ids, self._max_request_bytes), self.ack)
        with self._lock:
            if self._ended is not None:
                raise RunstreamError(self._ended.code, self._ended.message)
            self._waiting.append((self._sent, [m.event_id for m in req.events], fut))
            self._sent += 1
            self._requests.put(req)
        return fut.result(timeout)

    def _read(self) -> None:
        ended = RunstreamError("unavailable", "the broker ended the stream")
        try:
            for res in self._call:
                if res.HasField("control"):
                    c = cancel_of(res.control.cancel)
                    self.cancels.append(c)
                    if self.on_cancel:
                        self.on_cancel(c)
                    continue
                with self._lock:
                    answered = self._waiting.pop(0) if self._waiting else None
                if answered:
                    _answer(answered[2], [ack_of(a) for a in res.acks])
        except grpc.RpcError as err:
            ended = _error(err)
        finally:  # also when on_cancel raised: nobody else would answer
            with self._lock:
                # Set with the waiting taken, under the lock: a send is either among them or refused.
                answers, self._ended = _stream_ended(self._waiting, ended)
                self._waiting = []
            for fut, err in answers:
                _answer(fut, error=err)

    def cancel(self) -> None:
        """Cancels the call (the broker stops reading it)."""
        self._call.cancel()

    def close(self) -> None:
        """Half-closes and waits for the broker to finish."""
        self._requests.put(None)
        self._reader.join()


class AsyncPublisher:
    """The asyncio publisher: ``await publish(e)`` returns the ack; batching as for :class:`Publisher`."""

    def __init__(
        self,
        target: str,
        *,
        token: str | None = None,
        ack: str = "ACCEPTED",
        linger_ms: float = DEFAULT_LINGER_MS,
        max_batch_events: int = DEFAULT_MAX_BATCH_EVENTS,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        initial_delay_s: float = 0.1,
        max_delay_s: float = 5.0,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        max_queued: int = 10_000,
        id_prefix: str | None = None,
        max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
        on_retry: OnRetry | None = None,
        credentials: grpc.ChannelCredentials | None = None,
    ):
        o = _options(
            ack=ack,
            linger_ms=linger_ms,
            max_batch_events=max_batch_events,
            max_attempts=max_attempts,
            initial_delay_s=initial_delay_s,
            max_delay_s=max_delay_s,
            timeout_s=timeout_s,
            max_queued=max_queued,
            max_request_bytes=max_request_bytes,
            id_prefix=id_prefix,
        )
        self._target = target
        self._credentials = credentials
        self._token = token
        self.ack = ack
        self._linger_s = o.linger_s
        self._max_batch = o.max_batch
        self._max_attempts = o.max_attempts
        self._delays = o.delays
        self._timeout_s = o.timeout_s
        self._max_queued = o.max_queued
        self._ids = _IdSource(id_prefix) if id_prefix else _IdSource()
        self._max_request_bytes = o.max_request_bytes
        self._on_retry = on_retry
        self._channel: grpc.aio.Channel | None = None
        self._queue: asyncio.Queue | None = None
        self._worker: asyncio.Task | None = None
        self._closed = False
        self._closing: asyncio.Task | None = None
        # enqueue calls past the closed check, waiting for room in the queue: close() answers them too.
        self._entering = 0
        # publish_batch() calls in flight: close() waits for them before it closes the channel.
        self._batches: set[asyncio.Future] = set()

    def _ensure(self) -> asyncio.Queue:
        if self._queue is None:
            self._channel = (
                grpc.aio.insecure_channel(self._target, options=_CHANNEL_OPTIONS)
                if self._credentials is None
                else grpc.aio.secure_channel(self._target, self._credentials, options=_CHANNEL_OPTIONS)
            )
            self._publish = self._channel.unary_unary(
                PUBLISH,
                request_serializer=pb.PublishRequest.SerializeToString,
                response_deserializer=pb.PublishResponse.FromString,
            )
            self._queue = asyncio.Queue(maxsize=self._max_queued)
            self._worker = asyncio.get_running_loop().create_task(self._run())
        return self._queue

    async def publish(self, event: Event) -> Ack:
        return await (await self.enqueue(event))

    async def enqueue(self, event: Event) -> "asyncio.Future[Ack]":
        """Queues one event (waiting while the queue is full) and returns the future of its ack."""
        if self._closed:
            raise RunstreamError("closed", "the publisher is closed")
        msg, wire = _sized(event, self._ids, self._max_request_bytes)
        q = self._ensure()
        fut = asyncio.get_running_loop().create_future()
        self._entering += 1
        try:
            await q.put((msg, wire, fut))
        finally:
            self._entering -= 1
        return fut

    async def publish_many(self, events: Iterable[Event]) -> list[Ack]:
        futures = [await self.enqueue(e) for e in events]
        return list(await asyncio.gather(*futures))

    async def publish_batch(self, events: list[Event], ack: str | None = None) -> list[Ack]:
        if self._closed:
            raise RunstreamError("closed", "the publisher is closed")
        msgs = _protos(events, self._ids, self._max_request_bytes)
        self._ensure()
        done = asyncio.get_running_loop().create_future()
        self._batches.add(done)
        try:
            return await self._deliver(msgs, ack or self.ack)
        finally:
            self._batches.discard(done)
            done.set_result(None)

    async def flush(self) -> None:
        """Waits until everything handed over before it is acknowledged or failed."""
        if self._closed and self._queue is None:
            return
        q = self._ensure()
        fut = asyncio.get_running_loop().create_future()
        await q.put((None, 0, fut))
        await fut

    async def close(self) -> None:
        """Refuses new events, answers every one handed over before, then closes. Idempotent: a
        second call waits for the first."""
        if self._closing is None:
            self._closed = True
            self._closing = asyncio.get_running_loop().create_task(self._shut_down())
        await asyncio.shield(self._closing)

    async def _shut_down(self) -> None:
        if self._queue is None:
            return
        await self.flush()
        # Callers that passed the closed check while the queue was full put their events after it.
        while self._entering > 0 or not self._queue.empty():
            await self.flush()
        # A publish_batch() in flight would be cancelled by closing the channel under it.
        while self._batches:
            await asyncio.gather(*self._batches)
        if self._worker:
            self._worker.cancel()
        if self._channel:
            await self._channel.close()
        self._queue = None

    async def __aenter__(self) -> "AsyncPublisher":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    async def _deliver(self, msgs: list[pb.Event], ack: str) -> list[Ack]:
        req = _request(msgs, ack)
        for attempt in range(self._max_attempts):
            try:
                res = await self._publish(req, timeout=self._timeout_s, metadata=_metadata(self._token))
                return [ack_of(a) for a in res.acks]
            except grpc.aio.AioRpcError as err:
                if not _retryable(err) or attempt + 1 >= self._max_attempts:
                    raise _error(err) from None
                delay = backoff_delay(attempt, *self._delays)
                if self._on_retry:
                    self._on_retry(_error(err), attempt + 1, delay)
                await asyncio.sleep(delay)
        raise RunstreamError("unavailable", "out of attempts")

    async def _run(self) -> None:
        q = self._queue
        assert q is not None
        carry = None  # an event that did not fit the previous request: it starts the next
        while True:
            batch, carry = [carry if carry is not None else await q.get()], None
            size = batch[0][1]
            loop = asyncio.get_running_loop()
            deadline = loop.time() + self._linger_s
            while len(batch) < self._max_batch and batch[-1][0] is not None:
                remaining = deadline - loop.time()
                try:
                    # Past the linger, what is queued already (wait_for(get, 0) would take nothing).
                    nxt = q.get_nowait() if remaining <= 0 else await asyncio.wait_for(q.get(), remaining)
                except (asyncio.TimeoutError, asyncio.QueueEmpty):
                    break
                size += nxt[1]
                if size > self._max_request_bytes - _REQUEST_ENVELOPE_BYTES:
                    carry = nxt
                    break
                batch.append(nxt)
            events = [(m, f) for m, _, f in batch if m is not None]
            while events:
                try:
                    outcome = await self._deliver([m for m, _ in events], self.ack)
                except Exception as err:  # noqa: BLE001 - every waiter hears why
                    outcome = err
                if _settle(events, outcome):
                    break
            for m, _, f in batch:
                if m is None:
                    _answer(f)

    def open_stream(self, on_cancel: Callable[[Cancel], None] | None = None) -> "AsyncPublishStream":
        self._ensure()
        return AsyncPublishStream(self._channel, self._token, on_cancel, self._ids, self.ack, self._max_request_bytes)


class AsyncPublishStream:
    """The asyncio ``PublishStream``: ``await send(events)`` returns its acks; cancels go to ``on_cancel``.

    Requests are written by a task of the stream's, in order, so a caller that stops waiting (its
    task cancelled) neither takes its request back nor cancels the call."""

    def __init__(self, channel, token, on_cancel, ids: _IdSource, ack: str, max_request_bytes: int):
        stub = channel.stream_stream(
            PUBLISH_STREAM,
            request_serializer=pb.PublishRequest.SerializeToString,
            response_deserializer=pb.PublishResponse.FromString,
        )
        self._call = stub(metadata=_metadata(token))
        self._ids = ids
        self.ack = ack
        self._max_request_bytes = max_request_bytes
        self.on_cancel = on_cancel
        self.cancels: list[Cancel] = []
        # (the request's number on the stream, its event ids, its caller's future), in send order.
        self._waiting: list[tuple[int, list[str], asyncio.Future]] = []
        self._sent = 0
        self._outbox: asyncio.Queue = asyncio.Queue()
        # Why the call ended, once it has: later sends fail with it at once.
        self._ended: RunstreamError | None = None
        self._closed = False
        loop = asyncio.get_running_loop()
        self._reader = loop.create_task(self._read())
        self._writer = loop.create_task(self._write())

    async def send(self, events: list[Event]) -> list[Ack]:
        req = _request(_protos(events, self._ids, self._max_request_bytes), self.ack)
        if self._closed:
            raise RunstreamError("closed", "the stream is closed")
        if self._ended is not None:
            raise RunstreamError(self._ended.code, self._ended.message)
        fut = asyncio.get_running_loop().create_future()
        self._waiting.append((self._sent, [m.event_id for m in req.events], fut))
        self._sent += 1
        self._outbox.put_nowait(req)
        return await fut

    async def _write(self) -> None:
        while (req := await self._outbox.get()) is not None:
            try:
                await self._call.write(req)
            except (grpc.aio.AioRpcError, asyncio.InvalidStateError, asyncio.CancelledError):
                if not self._call.done():
                    raise
                return  # the call ended: _read answers every waiting request with why
        await self._call.done_writing()

    async def _read(self) -> None:
        ended = RunstreamError("unavailable", "the broker ended the stream")
        try:
            while True:
                res = await self._call.read()
                if res is grpc.aio.EOF:
                    break
                if res.HasField("control"):
                    c = cancel_of(res.control.cancel)
                    self.cancels.append(c)
                    if self.on_cancel:
                        self.on_cancel(c)
                    continue
                if self._waiting:
                    _answer(self._waiting.pop(0)[2], [ack_of(a) for a in res.acks])
        except grpc.aio.AioRpcError as err:
            ended = _error(err)
        except asyncio.CancelledError:
            if not self._call.cancelled():
                raise  # this task was cancelled, not the call
            ended = RunstreamError("cancelled", "the stream was cancelled")
        finally:
            answers, self._ended = _stream_ended(self._waiting, ended)
            self._waiting = []
            for fut, err in answers:
                _answer(fut, error=err)
            if self._call.done():
                self._writer.cancel()  # nothing more can be written (a write may wait forever)

    def cancel(self) -> None:
        self._call.cancel()

    async def close(self) -> None:
        """Half-closes once every request sent is written, and waits for the broker's answers."""
        if not self._closed:
            self._closed = True
            self._outbox.put_nowait(None)
        await asyncio.gather(self._writer, self._reader, return_exceptions=True)
