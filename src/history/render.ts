/**
 * The wire forms of History results: JSON for HTTP (events in their one client-facing
 * form, {@link eventJson}; runs and chat messages in snake_case with JSON values inline)
 * and the `runstream.v1` messages for gRPC.
 */
import { categoryEnum, eventJson, type StoredEvent } from '../domain/event.js';
import type { RunStatusName } from '../domain/run-lifecycle.js';
import { timeTextMs } from '../domain/time-text.js';
import type { Timestamp } from '../gen/google/protobuf/Timestamp.js';
import type { ChatMessage as ProtoChatMessage } from '../gen/runstream/v1/ChatMessage.js';
import type { ChatRole } from '../gen/runstream/v1/ChatRole.js';
import type { Event as ProtoEvent } from '../gen/runstream/v1/Event.js';
import type { Run as ProtoRun } from '../gen/runstream/v1/Run.js';
import type { RunStatus } from '../gen/runstream/v1/RunStatus.js';
import type { RunRecord } from '../persist/runs.js';
import type { ChatMessage, ChatRoleName } from './chat.js';

/** An RFC 3339 time, or a producer's time text (domain/time-text.ts), as a protobuf Timestamp. */
export function timestamp(iso: string): Timestamp {
  const ms = timeTextMs(iso) ?? Date.parse(iso);
  return { seconds: Math.floor(ms / 1000), nanos: (((ms % 1000) + 1000) % 1000) * 1_000_000 };
}

export function eventProto(e: StoredEvent): ProtoEvent {
  return {
    thread_id: e.thread_id,
    run_id: e.run_id,
    event_id: e.event_id,
    event_type: e.event_type,
    category: categoryEnum(e.category),
    category_name: e.category,
    user_id: e.user_id,
    created_at: timestamp(e.created_at),
    created_at_text: e.created_at_text ?? e.created_at,
    content_json: e.content_json,
    metadata_json: e.metadata_json,
    seq: e.seq,
    offset: e.offset,
  };
}

/** `[{event}, ...]` as one JSON array text, each event serialised by {@link eventJson}. */
export function eventsJson(events: readonly StoredEvent[]): string {
  return `[${events.map(eventJson).join(',')}]`;
}

export function runStatusProto(s: RunStatusName): RunStatus {
  return `RUN_STATUS_${s.toUpperCase()}` as RunStatus;
}

/** `RUN_STATUS_SUCCESS` or `success` → `success`; undefined for anything else. */
export function runStatusName(s: string): RunStatusName | undefined {
  const name = s.replace(/^RUN_STATUS_/, '').toLowerCase();
  return ['pending', 'running', 'success', 'error', 'interrupted', 'cancelled'].includes(name)
    ? (name as RunStatusName)
    : undefined;
}

export function runProto(r: RunRecord): ProtoRun {
  return {
    thread_id: r.thread_id,
    run_id: r.run_id,
    user_id: r.user_id,
    status: runStatusProto(r.status),
    first_seq: r.first_seq,
    last_seq: r.last_seq,
    end_seq: r.end_seq ?? 0,
    event_count: r.event_count,
    message_count: r.message_count,
    trace_count: r.trace_count,
    lifecycle_count: r.lifecycle_count,
    started_at: timestamp(r.started_at),
    updated_at: timestamp(r.updated_at),
    ended_at: r.ended_at === null ? null : timestamp(r.ended_at),
    metadata_json: r.metadata_json,
    outcome_json: r.outcome_json ?? '',
  };
}

/** A run as JSON text: `metadata` and `outcome` are the stored JSON, inline. */
export function runJson(r: RunRecord): string {
  const head = JSON.stringify({
    thread_id: r.thread_id,
    run_id: r.run_id,
    user_id: r.user_id,
    status: r.status,
    first_seq: r.first_seq,
    last_seq: r.last_seq,
    end_seq: r.end_seq,
    event_count: r.event_count,
    message_count: r.message_count,
    trace_count: r.trace_count,
    lifecycle_count: r.lifecycle_count,
    started_at: r.started_at,
    updated_at: r.updated_at,
    ended_at: r.ended_at,
  });
  return `${head.slice(0, -1)},"metadata":${r.metadata_json},"outcome":${r.outcome_json ?? 'null'}}`;
}

const PROTO_ROLE: Readonly<Record<ChatRoleName, ChatRole>> = {
  human: 'CHAT_ROLE_HUMAN',
  assistant: 'CHAT_ROLE_ASSISTANT',
  tool: 'CHAT_ROLE_TOOL',
  system: 'CHAT_ROLE_SYSTEM',
};

export function chatMessageProto(m: ChatMessage): ProtoChatMessage {
  return {
    role: PROTO_ROLE[m.role],
    id: m.id,
    run_id: m.run_id,
    user_id: m.user_id,
    content: m.content,
    tool_calls: m.tool_calls.map((c) => ({ id: c.id, name: c.name, arguments: c.arguments, seq: c.seq })),
    tool_call_id: m.tool_call_id ?? '',
    name: m.name ?? '',
    is_error: m.is_error ?? false,
    first_seq: m.first_seq,
    last_seq: m.last_seq,
    event_count: m.event_count,
    created_at: timestamp(m.created_at),
    metadata_json: m.metadata_json,
  };
}

/**
 * A chat message as JSON text. `tool_calls` only on assistant messages; `tool_call_id`,
 * `name` and `is_error` only on tool messages; `metadata` inline.
 */
export function chatMessageJson(m: ChatMessage): string {
  const head = JSON.stringify({
    role: m.role,
    id: m.id,
    run_id: m.run_id,
    user_id: m.user_id,
    content: m.content,
    ...(m.role === 'assistant' ? { tool_calls: m.tool_calls } : {}),
    ...(m.role === 'tool' ? { tool_call_id: m.tool_call_id, name: m.name, is_error: m.is_error } : {}),
    first_seq: m.first_seq,
    last_seq: m.last_seq,
    event_count: m.event_count,
    created_at: m.created_at,
  });
  return `${head.slice(0, -1)},"metadata":${m.metadata_json}}`;
}
