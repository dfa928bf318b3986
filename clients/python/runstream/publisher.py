"""Publishers over gRPC ``runstream.v1.Ingest``: sync (a worker thread) and asyncio (``grpc.aio``).

Both batch: the events waiting when a request can go (those handed over while the previous one
was out) go together, at most ``max_batch_events`` per request, in the order they were handed
over (one request at a time, so every thread's seq order is publish order). No timer holds an
event back unless ``linger_ms`` (default 0) asks an event to wait that long for others. Every
event's ``event_id`` is fixed before its first send, and a failed request is resent with the
same ids, so a retry is never stored twice. ``open_stream`` gives a ``PublishStream`` call that hands the broker's cancel
controls to a callback and matches acks to requests around them.
"""

from __future__ import annotations

import asyncio
import queue
import threading
import time
from concurrent.futures import Future
from typing import Callable, Iterable

import grpc
import grpc.aio

from runstream._common import (
    ACK_LEVELS,
    Ack,
    Cancel,
    Event,
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

RETRYABLE = {
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.DEADLINE_EXCEEDED,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
    grpc.StatusCode.ABORTED,
    grpc.StatusCode.INTERNAL,
    grpc.StatusCode.UNKNOWN,
}

_CHANNEL_OPTIONS = [("grpc.enable_http_proxy", 0), ("grpc.max_send_message_length", 64 * 1024 * 1024)]


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
    """A synchronous, batching, retrying publisher. ``publish`` returns a Future of the ack."""

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
    ):
        self._channel = grpc.insecure_channel(target, options=_CHANNEL_OPTIONS)
        self._publish = self._channel.unary_unary(
            PUBLISH, request_serializer=pb.PublishRequest.SerializeToString, response_deserializer=pb.PublishResponse.FromString
        )
        self._token = token
        self.ack = ack
        self._linger_s = linger_ms / 1000
        self._max_batch = max_batch_events
        self._max_attempts = max_attempts
        self._delays = (initial_delay_s, max_delay_s)
        self._timeout_s = timeout_s
        self._ids = _IdSource(id_prefix) if id_prefix else _IdSource()
        # Bounded: publish() blocks while max_queued events wait (backpressure).
        self._queue: queue.Queue = queue.Queue(maxsize=max_queued)
        self._closed = False
        # Held while checking _closed and queueing, so nothing is queued behind close()'s stop marker.
        self._lock = threading.Lock()
        self._worker = threading.Thread(target=self._run, name="runstream-publisher", daemon=True)
        self._worker.start()

    def publish(self, event: Event) -> "Future[Ack]":
        """Queues one event (blocking while the queue is full); the Future resolves with its ack."""
        fut: Future = Future()
        item = (to_proto(event, self._ids), fut)
        with self._lock:
            if self._closed:
                raise RunstreamError("closed", "the publisher is closed")
            self._queue.put(item)
        return fut

    def publish_many(self, events: Iterable[Event], timeout: float | None = None) -> list[Ack]:
        """Publishes events and waits for their acks, in order."""
        futures = [self.publish(e) for e in events]
        return [f.result(timeout) for f in futures]

    def publish_batch(self, events: list[Event], ack: str | None = None) -> list[Ack]:
        """One request now, bypassing the linger; retried with the same ids."""
        msgs = [to_proto(e, self._ids) for e in events]
        return self._deliver(msgs, ack or self.ack)

    def flush(self) -> None:
        """Waits until everything published so far is acknowledged or failed."""
        fut: Future = Future()
        with self._lock:
            if not self._closed:
                self._queue.put((None, fut))
        if self._closed:
            self._worker.join()  # closing answers everything, then the worker ends
        else:
            fut.result()

    def close(self) -> None:
        """Refuses new events, answers every one published before, then closes. Idempotent: a
        second call waits for the first."""
        with self._lock:
            first = not self._closed
            self._closed = True
            if first:
                self._queue.put(None)  # behind every event queued: nothing can come after it
        self._worker.join()
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
                if err.code() not in RETRYABLE or attempt + 1 >= self._max_attempts:
                    raise _error(err) from None
                time.sleep(backoff_delay(attempt, *self._delays))
        raise RunstreamError("unavailable", "out of attempts")

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            batch = [item]
            stop = False
            deadline = time.monotonic() + self._linger_s
            while len(batch) < self._max_batch and batch[-1][0] is not None:
                remaining = deadline - time.monotonic()
                try:
                    nxt = self._queue.get(timeout=max(0.0, remaining)) if remaining > 0 else self._queue.get_nowait()
                except queue.Empty:
                    break
                if nxt is None:
                    stop = True  # the last item: close() queues nothing after it
                    break
                batch.append(nxt)
            events = [(m, f) for m, f in batch if m is not None]
            if events:
                try:
                    acks = self._deliver([m for m, _ in events], self.ack)
                    for (_, f), a in zip(events, acks):
                        f.set_result(a)
                except Exception as err:  # noqa: BLE001 - every waiter hears why
                    for _, f in events:
                        f.set_exception(err)
            for m, f in batch:
                if m is None:
                    f.set_result(None)
            if stop:
                return

    def open_stream(self, on_cancel: Callable[[Cancel], None] | None = None) -> "PublishStream":
        return PublishStream(self._channel, self._token, on_cancel, self._ids, self.ack)


class PublishStream:
    """A ``PublishStream`` call: ``send`` returns the acks of its request; cancels go to ``on_cancel``."""

    def __init__(self, channel, token, on_cancel, ids: _IdSource, ack: str):
        call = channel.stream_stream(
            PUBLISH_STREAM,
            request_serializer=pb.PublishRequest.SerializeToString,
            response_deserializer=pb.PublishResponse.FromString,
        )
        self._requests: queue.Queue = queue.Queue()
        self._waiting: list[Future] = []
        self._lock = threading.Lock()
        self._ids = ids
        self.ack = ack
        self.on_cancel = on_cancel
        self.cancels: list[Cancel] = []
        self._call = call(iter(self._requests.get, None), metadata=_metadata(token))
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def send(self, events: list[Event], timeout: float | None = None) -> list[Ack]:
        fut: Future = Future()
        req = _request([to_proto(e, self._ids) for e in events], self.ack)
        with self._lock:
            self._waiting.append(fut)
            self._requests.put(req)
        return fut.result(timeout)

    def _read(self) -> None:
        try:
            for res in self._call:
                if res.HasField("control"):
                    c = cancel_of(res.control.cancel)
                    self.cancels.append(c)
                    if self.on_cancel:
                        self.on_cancel(c)
                    continue
                with self._lock:
                    fut = self._waiting.pop(0) if self._waiting else None
                if fut:
                    fut.set_result([ack_of(a) for a in res.acks])
        except grpc.RpcError as err:
            with self._lock:
                waiting, self._waiting = self._waiting, []
            for f in waiting:
                f.set_exception(_error(err))

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
    ):
        self._target = target
        self._token = token
        self.ack = ack
        self._linger_s = linger_ms / 1000
        self._max_batch = max_batch_events
        self._max_attempts = max_attempts
        self._delays = (initial_delay_s, max_delay_s)
        self._timeout_s = timeout_s
        self._max_queued = max_queued
        self._ids = _IdSource(id_prefix) if id_prefix else _IdSource()
        self._channel: grpc.aio.Channel | None = None
        self._queue: asyncio.Queue | None = None
        self._worker: asyncio.Task | None = None
        self._closed = False
        self._closing: asyncio.Task | None = None
        # enqueue calls past the closed check, waiting for room in the queue: close() answers them too.
        self._entering = 0

    def _ensure(self) -> asyncio.Queue:
        if self._queue is None:
            self._channel = grpc.aio.insecure_channel(self._target, options=_CHANNEL_OPTIONS)
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
        q = self._ensure()
        fut = asyncio.get_running_loop().create_future()
        self._entering += 1
        try:
            await q.put((to_proto(event, self._ids), fut))
        finally:
            self._entering -= 1
        return fut

    async def publish_many(self, events: Iterable[Event]) -> list[Ack]:
        futures = [await self.enqueue(e) for e in events]
        return list(await asyncio.gather(*futures))

    async def publish_batch(self, events: list[Event], ack: str | None = None) -> list[Ack]:
        if self._closed:
            raise RunstreamError("closed", "the publisher is closed")
        self._ensure()
        return await self._deliver([to_proto(e, self._ids) for e in events], ack or self.ack)

    async def flush(self) -> None:
        """Waits until everything handed over before it is acknowledged or failed."""
        if self._closed and self._queue is None:
            return
        q = self._ensure()
        fut = asyncio.get_running_loop().create_future()
        await q.put((None, fut))
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
                if err.code() not in RETRYABLE or attempt + 1 >= self._max_attempts:
                    raise _error(err) from None
                await asyncio.sleep(backoff_delay(attempt, *self._delays))
        raise RunstreamError("unavailable", "out of attempts")

    async def _run(self) -> None:
        q = self._queue
        assert q is not None
        while True:
            batch = [await q.get()]
            loop = asyncio.get_running_loop()
            deadline = loop.time() + self._linger_s
            while len(batch) < self._max_batch and batch[-1][0] is not None:
                remaining = deadline - loop.time()
                try:
                    # Past the linger, what is queued already (wait_for(get, 0) would take nothing).
                    batch.append(q.get_nowait() if remaining <= 0 else await asyncio.wait_for(q.get(), remaining))
                except (asyncio.TimeoutError, asyncio.QueueEmpty):
                    break
            events = [(m, f) for m, f in batch if m is not None]
            if events:
                try:
                    acks = await self._deliver([m for m, _ in events], self.ack)
                    for (_, f), a in zip(events, acks):
                        f.set_result(a)
                except Exception as err:  # noqa: BLE001 - every waiter hears why
                    for _, f in events:
                        f.set_exception(err)
            for m, f in batch:
                if m is None:
                    f.set_result(None)

    def open_stream(self, on_cancel: Callable[[Cancel], None] | None = None) -> "AsyncPublishStream":
        self._ensure()
        return AsyncPublishStream(self._channel, self._token, on_cancel, self._ids, self.ack)


class AsyncPublishStream:
    """The asyncio ``PublishStream``: ``await send(events)`` returns its acks; cancels go to ``on_cancel``."""

    def __init__(self, channel, token, on_cancel, ids: _IdSource, ack: str):
        stub = channel.stream_stream(
            PUBLISH_STREAM,
            request_serializer=pb.PublishRequest.SerializeToString,
            response_deserializer=pb.PublishResponse.FromString,
        )
        self._call = stub(metadata=_metadata(token))
        self._ids = ids
        self.ack = ack
        self.on_cancel = on_cancel
        self.cancels: list[Cancel] = []
        self._waiting: list[asyncio.Future] = []
        self._reader = asyncio.get_running_loop().create_task(self._read())

    async def send(self, events: list[Event]) -> list[Ack]:
        fut = asyncio.get_running_loop().create_future()
        self._waiting.append(fut)
        await self._call.write(_request([to_proto(e, self._ids) for e in events], self.ack))
        return await fut

    async def _read(self) -> None:
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
                    self._waiting.pop(0).set_result([ack_of(a) for a in res.acks])
        except grpc.aio.AioRpcError as err:
            waiting, self._waiting = self._waiting, []
            for f in waiting:
                f.set_exception(_error(err))

    def cancel(self) -> None:
        self._call.cancel()

    async def close(self) -> None:
        await self._call.done_writing()
        await self._reader
