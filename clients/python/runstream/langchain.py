"""A LangChain / LangGraph callback handler that streams a run through runstream.

    from runstream.langchain import RunstreamCallbackHandler
    handler = RunstreamCallbackHandler(publisher, thread_id="t1", run_id="r1")
    graph.invoke(inputs, config={"callbacks": [handler]})

It turns callbacks into events with the categories DeerFlow's RunJournal uses, and the event
types runstream's chat view understands (docs/api.md, the chat projection):

| callback                                   | event_type    | category  |
|--------------------------------------------|---------------|-----------|
| the root chain starts                      | run_start     | lifecycle |
| on_chat_model_start / on_llm_start         | llm_start     | trace     |
| on_llm_new_token                           | ai_chunk      | message   |
| on_llm_end                                 | llm_end       | trace     |
| a tool call in the model's output          | tool_call     | trace     |
| on_tool_start                              | tool_start    | trace     |
| on_tool_end / on_tool_error                | tool_result   | message   |
| the root chain ends / fails                | run_end       | lifecycle |

Chunks carry ``metadata.id`` = the LangChain run id of their model call, so a model call's
tokens form one assistant message. Events go through the publisher's batching (those that wait
behind a request in flight go together), with ids ``<run_id>-<n>`` that are stable across retries.
``langchain_core`` is optional: without it the handler is a plain object with the same methods.
"""

from __future__ import annotations

import json
import threading
from typing import Any
from uuid import UUID

from runstream._common import Event
from runstream.publisher import Publisher

try:
    from langchain_core.callbacks import BaseCallbackHandler as _Base  # type: ignore
except ImportError:  # pragma: no cover - LangChain is optional
    _Base = object  # type: ignore[assignment,misc]


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)


def _generation_message(response: Any) -> Any:
    """The first generation's message of an LLMResult (or its dict form), if any."""
    gens = getattr(response, "generations", None)
    if gens is None and isinstance(response, dict):
        gens = response.get("generations")
    if not gens or not gens[0]:
        return None
    g = gens[0][0]
    return getattr(g, "message", None) or (g.get("message") if isinstance(g, dict) else None)


def _field(obj: Any, name: str, default: Any = None) -> Any:
    if isinstance(obj, dict):
        return obj.get(name, default)
    return getattr(obj, name, default)


class RunstreamCallbackHandler(_Base):  # type: ignore[misc,valid-type]
    """Publishes a run's callbacks as runstream events; add it to ``callbacks`` and nothing else."""

    raise_error = False
    run_inline = True

    def __init__(self, publisher: Publisher, *, thread_id: str, run_id: str, user_id: str = ""):
        if _Base is not object:
            super().__init__()
        self.publisher = publisher
        self.thread_id = thread_id
        self.run_id = run_id
        self.user_id = user_id
        self._n = 0
        self._lock = threading.Lock()
        self._root: UUID | None = None
        self._tools: dict[UUID, dict] = {}
        self.futures: list = []

    def _emit(self, event_type: str, category: str, content: Any, metadata: dict | None = None) -> None:
        with self._lock:
            self._n += 1
            event_id = f"{self.run_id}-{self._n}"
        self.futures.append(
            self.publisher.publish(
                Event(
                    thread_id=self.thread_id,
                    run_id=self.run_id,
                    event_type=event_type,
                    category=category,
                    content=content,
                    metadata=metadata or {},
                    event_id=event_id,
                    user_id=self.user_id,
                )
            )
        )

    # ---- run lifecycle (the outermost chain) ----------------------------------------------

    def on_chain_start(self, serialized: Any, inputs: Any, *, run_id: UUID, parent_run_id: UUID | None = None, **kw: Any) -> None:
        if parent_run_id is None and self._root is None:
            self._root = run_id
            name = _field(serialized or {}, "name") or kw.get("name") or ""
            self._emit("run_start", "lifecycle", {"run_id": self.run_id, "name": name})
            for m in _field(inputs or {}, "messages", []) or []:
                if _field(m, "type") == "human":
                    self._emit(
                        "human_message",
                        "message",
                        {"content": _text(_field(m, "content", ""))},
                        {"id": _field(m, "id") or f"human-{self._n + 1}"},
                    )

    def on_chain_end(self, outputs: Any, *, run_id: UUID, **kw: Any) -> None:
        if run_id == self._root:
            self._emit("run_end", "lifecycle", {"status": "success"})

    def on_chain_error(self, error: BaseException, *, run_id: UUID, **kw: Any) -> None:
        if run_id == self._root:
            interrupted = type(error).__name__ in ("GraphInterrupt", "NodeInterrupt")
            status = "interrupted" if interrupted else "error"
            self._emit("run_end", "lifecycle", {"status": status, "error": type(error).__name__, "message": str(error)})

    # ---- model calls ----------------------------------------------------------------------

    def on_chat_model_start(self, serialized: Any, messages: Any, *, run_id: UUID, **kw: Any) -> None:
        self._emit("llm_start", "trace", {"model": _field(serialized or {}, "name") or "", "call_id": str(run_id)})

    def on_llm_start(self, serialized: Any, prompts: Any, *, run_id: UUID, **kw: Any) -> None:
        self._emit("llm_start", "trace", {"model": _field(serialized or {}, "name") or "", "call_id": str(run_id)})

    def on_llm_new_token(self, token: str, *, run_id: UUID, **kw: Any) -> None:
        if token:
            self._emit("ai_chunk", "message", {"content": token}, {"id": f"msg-{run_id}"})

    def on_llm_end(self, response: Any, *, run_id: UUID, **kw: Any) -> None:
        message = _generation_message(response)
        for call in _field(message, "tool_calls", None) or []:
            self._emit(
                "tool_call",
                "trace",
                {
                    "call_id": _field(call, "id") or "",
                    "name": _field(call, "name") or "",
                    "arguments": _text(_field(call, "args", {})),
                },
                {"id": f"msg-{run_id}"},
            )
        usage = _field(response, "llm_output", None) or {}
        self._emit("llm_end", "trace", {"call_id": str(run_id), "usage": usage.get("token_usage", {}) if isinstance(usage, dict) else {}})

    def on_llm_error(self, error: BaseException, *, run_id: UUID, **kw: Any) -> None:
        self._emit("llm_end", "trace", {"call_id": str(run_id), "error": str(error)})

    # ---- tools ----------------------------------------------------------------------------

    def on_tool_start(self, serialized: Any, input_str: str, *, run_id: UUID, **kw: Any) -> None:
        name = _field(serialized or {}, "name") or kw.get("name") or ""
        call_id = (kw.get("inputs") or {}).get("tool_call_id") if isinstance(kw.get("inputs"), dict) else None
        self._tools[run_id] = {"name": name, "call_id": call_id or kw.get("tool_call_id") or str(run_id)}
        self._emit("tool_start", "trace", {"name": name, "input": input_str, "call_id": self._tools[run_id]["call_id"]})

    def on_tool_end(self, output: Any, *, run_id: UUID, **kw: Any) -> None:
        tool = self._tools.pop(run_id, {"name": kw.get("name", ""), "call_id": str(run_id)})
        call_id = _field(output, "tool_call_id") or tool["call_id"]
        content = _field(output, "content", output)
        self._emit("tool_result", "message", {"call_id": call_id, "name": tool["name"], "content": _text(content)})

    def on_tool_error(self, error: BaseException, *, run_id: UUID, **kw: Any) -> None:
        tool = self._tools.pop(run_id, {"name": kw.get("name", ""), "call_id": str(run_id)})
        self._emit(
            "tool_result",
            "message",
            {"call_id": tool["call_id"], "name": tool["name"], "content": str(error), "is_error": True},
        )

    def flush(self) -> None:
        """Waits until every event so far is acknowledged (raises if one failed)."""
        self.publisher.flush()
        for f in self.futures:
            f.result()
