/**
 * The demo agent's built-in script: a verbatim copy of `../shared/fixtures/agent-runs.jsonl`
 * (two runs on one thread: a research run with Chinese tokens, a web search and a note tool
 * call; a calculator run that fails), so the demo works from a clean clone without `../shared`.
 */
export const BUILTIN_FIXTURE_JSONL = String.raw`{"thread_id": "thread-7f3a", "run_id": "run-01J8Z", "event_type": "metadata", "category": "lifecycle", "content": {"run_id": "run-01J8Z", "assistant_id": "agent"}, "metadata": {}}
{"thread_id": "thread-7f3a", "run_id": "run-01J8Z", "event_type": "human_message", "category": "message", "content": {"content": "请客观评价一下张邦昌"}, "metadata": {"id": "msg-h1"}}
{"thread_id": "thread-7f3a", "run_id": "run-01J8Z", "event_type": "llm_start", "category": "trace", "content": {"model": "deepseek-chat"}, "metadata": {}}
{"thread_id": "thread-7f3a", "run_id": "run-01J8Z", "event_type": "ai_chunk", "category": "message", "content": {"content": "我先"}, "metadata": {"id": "msg-a1"}}
{"thread_id": "thread-7f3a", "run_id": "run-01J8Z", "event_type": "ai_chunk", "category": "message", "content": {"content": "查一下"}, "metadata": {"id": "msg-a1"}}
{"thread_id": "thread-7f3a", "run_id": "run-01J8Z", "event_type": "ai_chunk", "category": "message", "content": {"content": "相关"}, "metadata": {"id": "msg-a1"}}
{"thread_id": "thread-7f3a", "run_id": "run-01J8Z", "event_type": "ai_chunk", "category": "message", "content": {"content": "史料。"}, "metadata": {"id": "msg-a1"}}
{"thread_id": "thread-7f3a", "run_id": "run-01J8Z", "event_type": "tool_call", "category": "trace", "content": {"call_id": "call_00_a", "name": "web_search", "arguments": "{\"query\": \"张邦昌 评价\"}"}, "metadata": {"id": "msg-a1"}}
{"thread_id": "thread-7f3a", "run_id": "run-01J8Z", "event_type": "tool_result", "category": "message", "content": {"call_id": "call_00_a", "content": "张邦昌（1081—1127），北宋末年大臣……", "is_error": false}, "metadata": {}}
{"thread_id": "thread-7f3a", "run_id": "run-01J8Z", "event_type": "ai_chunk", "category": "message", "content": {"content": "张邦昌"}, "metadata": {"id": "msg-a2"}}
{"thread_id": "thread-7f3a", "run_id": "run-01J8Z", "event_type": "ai_chunk", "category": "message", "content": {"content": "在靖康"}, "metadata": {"id": "msg-a2"}}
{"thread_id": "thread-7f3a", "run_id": "run-01J8Z", "event_type": "ai_chunk", "category": "message", "content": {"content": "之变后"}, "metadata": {"id": "msg-a2"}}
{"thread_id": "thread-7f3a", "run_id": "run-01J8Z", "event_type": "ai_chunk", "category": "message", "content": {"content": "被金人"}, "metadata": {"id": "msg-a2"}}
{"thread_id": "thread-7f3a", "run_id": "run-01J8Z", "event_type": "ai_chunk", "category": "message", "content": {"content": "立为"}, "metadata": {"id": "msg-a2"}}
{"thread_id": "thread-7f3a", "run_id": "run-01J8Z", "event_type": "ai_chunk", "category": "message", "content": {"content": "伪楚"}, "metadata": {"id": "msg-a2"}}
{"thread_id": "thread-7f3a", "run_id": "run-01J8Z", "event_type": "ai_chunk", "category": "message", "content": {"content": "皇帝，"}, "metadata": {"id": "msg-a2"}}
{"thread_id": "thread-7f3a", "run_id": "run-01J8Z", "event_type": "ai_chunk", "category": "message", "content": {"content": "但仅"}, "metadata": {"id": "msg-a2"}}
{"thread_id": "thread-7f3a", "run_id": "run-01J8Z", "event_type": "ai_chunk", "category": "message", "content": {"content": "三十三天"}, "metadata": {"id": "msg-a2"}}
{"thread_id": "thread-7f3a", "run_id": "run-01J8Z", "event_type": "ai_chunk", "category": "message", "content": {"content": "后便"}, "metadata": {"id": "msg-a2"}}
{"thread_id": "thread-7f3a", "run_id": "run-01J8Z", "event_type": "ai_chunk", "category": "message", "content": {"content": "还政"}, "metadata": {"id": "msg-a2"}}
{"thread_id": "thread-7f3a", "run_id": "run-01J8Z", "event_type": "ai_chunk", "category": "message", "content": {"content": "于赵构。"}, "metadata": {"id": "msg-a2"}}
{"thread_id": "thread-7f3a", "run_id": "run-01J8Z", "event_type": "tool_call", "category": "trace", "content": {"call_id": "call_01_b", "name": "note", "arguments": "{\"action\": \"create\", \"task_id\": 1}"}, "metadata": {"id": "msg-a2", "stream_token": "task_1"}}
{"thread_id": "thread-7f3a", "run_id": "run-01J8Z", "event_type": "tool_result", "category": "message", "content": {"call_id": "call_01_b", "content": "✅ 笔记创建成功\nID: note_4c2", "is_error": false}, "metadata": {"stream_token": "task_1"}}
{"thread_id": "thread-7f3a", "run_id": "run-01J8Z", "event_type": "llm_end", "category": "trace", "content": {"usage": {"input_tokens": 812, "output_tokens": 96}}, "metadata": {}}
{"thread_id": "thread-7f3a", "run_id": "run-01J8Z", "event_type": "end", "category": "lifecycle", "content": {"status": "success"}, "metadata": {}}
{"thread_id": "thread-7f3a", "run_id": "run-01J90", "event_type": "metadata", "category": "lifecycle", "content": {"run_id": "run-01J90", "assistant_id": "agent"}, "metadata": {}}
{"thread_id": "thread-7f3a", "run_id": "run-01J90", "event_type": "human_message", "category": "message", "content": {"content": "What is 1+2*3? Use the calculator."}, "metadata": {"id": "msg-h2"}}
{"thread_id": "thread-7f3a", "run_id": "run-01J90", "event_type": "tool_call", "category": "trace", "content": {"call_id": "call_02_c", "name": "calculator", "arguments": "{\"expression\": \"1+2*3\"}"}, "metadata": {"id": "msg-a3"}}
{"thread_id": "thread-7f3a", "run_id": "run-01J90", "event_type": "tool_result", "category": "message", "content": {"call_id": "call_02_c", "content": "7.0", "is_error": false}, "metadata": {}}
{"thread_id": "thread-7f3a", "run_id": "run-01J90", "event_type": "ai_chunk", "category": "message", "content": {"content": "1 + 2 × 3 "}, "metadata": {"id": "msg-a4"}}
{"thread_id": "thread-7f3a", "run_id": "run-01J90", "event_type": "ai_chunk", "category": "message", "content": {"content": "= "}, "metadata": {"id": "msg-a4"}}
{"thread_id": "thread-7f3a", "run_id": "run-01J90", "event_type": "ai_chunk", "category": "message", "content": {"content": "7"}, "metadata": {"id": "msg-a4"}}
{"thread_id": "thread-7f3a", "run_id": "run-01J90", "event_type": "error", "category": "lifecycle", "content": {"status": "error", "message": "upstream model timeout after 30s"}, "metadata": {}}
`;
