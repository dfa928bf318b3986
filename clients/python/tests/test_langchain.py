"""The callback handler, driven by a recorded LangChain callback sequence (LangChain itself is
not in Debian): the run streams through runstream and History's chat view shows the chat."""

from uuid import uuid4

from runstream import HistoryClient, Publisher
from runstream.langchain import RunstreamCallbackHandler


def test_a_recorded_agent_run_becomes_runstream_events(grpc_target, http_url, thread):
    root, llm1, tool, llm2 = uuid4(), uuid4(), uuid4(), uuid4()
    with Publisher(grpc_target, ack="PERSISTED") as pub:
        h = RunstreamCallbackHandler(pub, thread_id=thread, run_id="run-lc")
        h.on_chain_start(
            {"name": "agent"},
            {"messages": [{"type": "human", "content": "天气如何?", "id": "h-1"}]},
            run_id=root,
            parent_run_id=None,
        )
        h.on_chat_model_start({"name": "ChatModel"}, [[]], run_id=llm1, parent_run_id=root)
        for t in ["我查", "一下。"]:
            h.on_llm_new_token(t, run_id=llm1, parent_run_id=root)
        h.on_llm_end(
            {
                "generations": [
                    [{"message": {"tool_calls": [{"id": "call-1", "name": "weather", "args": {"city": "北京"}}]}}]
                ],
                "llm_output": {"token_usage": {"total_tokens": 12}},
            },
            run_id=llm1,
            parent_run_id=root,
        )
        h.on_tool_start({"name": "weather"}, '{"city": "北京"}', run_id=tool, parent_run_id=root, inputs={"tool_call_id": "call-1"})
        h.on_tool_end({"content": "晴", "tool_call_id": "call-1"}, run_id=tool, parent_run_id=root)
        h.on_chat_model_start({"name": "ChatModel"}, [[]], run_id=llm2, parent_run_id=root)
        h.on_llm_new_token("晴天。", run_id=llm2, parent_run_id=root)
        h.on_llm_end({"generations": [[{"message": {}}]]}, run_id=llm2, parent_run_id=root)
        h.on_chain_end({}, run_id=root)
        h.flush()

    history = HistoryClient(http_url)
    events = history.list_events(thread, limit=100)["events"]
    assert [(e["event_type"], e["category"]) for e in events] == [
        ("run_start", "lifecycle"),
        ("human_message", "message"),
        ("llm_start", "trace"),
        ("ai_chunk", "message"),
        ("ai_chunk", "message"),
        ("tool_call", "trace"),
        ("llm_end", "trace"),
        ("tool_start", "trace"),
        ("tool_result", "message"),
        ("llm_start", "trace"),
        ("ai_chunk", "message"),
        ("llm_end", "trace"),
        ("run_end", "lifecycle"),
    ]
    assert [e["event_id"] for e in events] == [f"run-lc-{i}" for i in range(1, 14)]
    chat = history.list_messages(thread, view="chat")["messages"]
    assert [(m["role"], m["content"]) for m in chat] == [
        ("human", "天气如何?"),
        ("assistant", "我查一下。"),
        ("tool", "晴"),
        ("assistant", "晴天。"),
    ]
    assert chat[1]["tool_calls"][0]["name"] == "weather"
    assert chat[2]["name"] == "weather" and chat[2]["tool_call_id"] == "call-1"
    assert history.get_run(thread, "run-lc")["status"] == "success"


def test_a_failed_root_chain_ends_the_run_with_error(grpc_target, http_url, thread):
    root = uuid4()
    with Publisher(grpc_target, ack="PERSISTED") as pub:
        h = RunstreamCallbackHandler(pub, thread_id=thread, run_id="run-err")
        h.on_chain_start({"name": "agent"}, {}, run_id=root, parent_run_id=None)
        h.on_chain_error(RuntimeError("model timeout"), run_id=root)
        h.flush()
    run = HistoryClient(http_url).get_run(thread, "run-err")
    assert run["status"] == "error"
    assert run["outcome"]["message"] == "model timeout"
