"""runstream for Python: a batching gRPC publisher (sync and asyncio), a resuming WebSocket
subscriber (asyncio), a History client, a DeerFlow RunEventStore and a LangChain callback.

    from runstream import Event, Publisher
    with Publisher("127.0.0.1:50051", ack="PERSISTED") as pub:
        ack = pub.publish(Event("thread-1", "run-1", "ai_chunk", "message", {"content": "hi"})).result()
"""

from runstream._common import Ack, Cancel, Event, RunstreamError
from runstream.history import AsyncHistoryClient, HistoryClient
from runstream.publisher import AsyncPublisher, AsyncPublishStream, Publisher, PublishStream
from runstream.subscriber import Item, Subscription, subscribe

__all__ = [
    "Ack",
    "AsyncHistoryClient",
    "AsyncPublishStream",
    "AsyncPublisher",
    "Cancel",
    "Event",
    "HistoryClient",
    "Item",
    "PublishStream",
    "Publisher",
    "RunstreamError",
    "Subscription",
    "subscribe",
]
