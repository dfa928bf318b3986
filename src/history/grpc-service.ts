/**
 * `runstream.v1.History` on the process's gRPC server: parses each request, asks the
 * {@link Authenticator} who is calling, runs the {@link History} operation and renders
 * the result. Errors end the call with the status of the error table (src/errors.ts).
 */
import * as grpc from '@grpc/grpc-js';
import { type Authenticator, bearerFromGrpc, type Principal } from '../auth/principal.js';
import { checkedCategories, requestCategories } from '../domain/event.js';
import { toRunstreamError } from '../errors.js';
import type { ProtoGrpcType as HistoryProto } from '../gen/history.js';
import type { DeleteResponse } from '../gen/runstream/v1/DeleteResponse.js';
import type { HistoryHandlers } from '../gen/runstream/v1/History.js';
import type { ListEventsResponse } from '../gen/runstream/v1/ListEventsResponse.js';
import type { GrpcServer } from '../grpc/server.js';
import type { Logger } from '../logger.js';
import { loadProto } from '../proto.js';
import type { DeleteResult } from './deleter.js';
import type { EventsPage, History } from './history.js';
import {
  categoriesOf,
  eventTypesOf,
  limitOf,
  optionalId,
  requiredId,
  seqOf,
  statusesOf,
  taskIdOf,
} from './params.js';
import { chatMessageProto, eventProto, runProto, runStatusName } from './render.js';

export const HISTORY_SERVICE = 'runstream.v1.History';

export interface HistoryGrpcOptions {
  readonly history: History;
  readonly auth: Authenticator;
  readonly log: Logger;
}

function pageProto(p: EventsPage): ListEventsResponse {
  return {
    events: p.events.map(eventProto),
    next_after_seq: p.nextAfterSeq ?? 0,
    next_before_seq: p.nextBeforeSeq ?? 0,
    has_more: p.hasMore,
  };
}

function deleteProto(r: DeleteResult): DeleteResponse {
  return { ...r };
}

/** before_seq as the operations take it: 0 (unset) means none. */
function beforeOf(v: number): number | undefined {
  const n = seqOf(v, 'before_seq');
  return n === 0 ? undefined : n;
}

/** The paging fields every list request carries, checked in field order. */
function pagingOf(r: { after_seq: number; before_seq: number; limit: number; user_id: string }) {
  return {
    afterSeq: seqOf(r.after_seq, 'after_seq'),
    beforeSeq: beforeOf(r.before_seq),
    limit: limitOf(r.limit),
    userId: optionalId(r.user_id, 'user_id'),
  };
}

export class HistoryGrpcService {
  readonly #o: HistoryGrpcOptions;

  constructor(o: HistoryGrpcOptions) {
    this.#o = o;
  }

  register(server: GrpcServer): void {
    const h = this.#o.history;
    const handlers: HistoryHandlers = {
      ListEvents: this.#unary('ListEvents', async (p, r) =>
        pageProto(
          await h.listEvents(p, {
            threadId: requiredId(r.thread_id, 'thread_id'),
            runId: optionalId(r.run_id, 'run_id'),
            categories: checkedCategories(r.categories, r.category_names, () =>
              categoriesOf(requestCategories(r.categories, r.category_names)),
            ),
            eventTypes: eventTypesOf(r.event_types),
            taskId: taskIdOf(r.metadata_task_id, 'metadata_task_id', true),
            ...pagingOf(r),
          }),
        ),
      ),
      ListMessages: this.#unary('ListMessages', async (p, r) =>
        pageProto(
          await h.listEvents(p, {
            threadId: requiredId(r.thread_id, 'thread_id'),
            categories: new Set(['message'] as const),
            ...pagingOf(r),
          }),
        ),
      ),
      ListMessagesByRun: this.#unary('ListMessagesByRun', async (p, r) =>
        pageProto(
          await h.listEvents(p, {
            threadId: requiredId(r.thread_id, 'thread_id'),
            runId: requiredId(r.run_id, 'run_id'),
            categories: new Set(['message'] as const),
            ...pagingOf(r),
          }),
        ),
      ),
      CountMessages: this.#unary('CountMessages', async (p, r) => {
        const threadId = requiredId(r.thread_id, 'thread_id');
        const runId = optionalId(r.run_id, 'run_id');
        return { count: await h.countMessages(p, threadId, runId, optionalId(r.user_id, 'user_id')) };
      }),
      ListChatMessages: this.#unary('ListChatMessages', async (p, r) => {
        const page = await h.chat(p, {
          threadId: requiredId(r.thread_id, 'thread_id'),
          runId: optionalId(r.run_id, 'run_id'),
          ...pagingOf(r),
        });
        return {
          messages: page.messages.map(chatMessageProto),
          next_after_seq: page.nextAfterSeq ?? 0,
          next_before_seq: page.nextBeforeSeq ?? 0,
          has_more: page.hasMore,
        };
      }),
      DeleteThread: this.#unary('DeleteThread', async (p, r) =>
        deleteProto(
          await h.deleteThread(p, requiredId(r.thread_id, 'thread_id'), optionalId(r.user_id, 'user_id')),
        ),
      ),
      DeleteRun: this.#unary('DeleteRun', async (p, r) =>
        deleteProto(
          await h.deleteRun(
            p,
            requiredId(r.thread_id, 'thread_id'),
            requiredId(r.run_id, 'run_id'),
            optionalId(r.user_id, 'user_id'),
          ),
        ),
      ),
      GetRun: this.#unary('GetRun', async (p, r) =>
        runProto(
          await h.getRun(
            p,
            requiredId(r.thread_id, 'thread_id'),
            requiredId(r.run_id, 'run_id'),
            optionalId(r.user_id, 'user_id'),
          ),
        ),
      ),
      ListRuns: this.#unary('ListRuns', async (p, r) => {
        const page = await h.listRuns(p, {
          threadId: requiredId(r.thread_id, 'thread_id'),
          beforeSeq: beforeOf(r.before_seq),
          statuses: statusesOf(
            r.statuses.map((s) => (typeof s === 'string' ? (runStatusName(s) ?? s) : String(s))),
          ),
          limit: limitOf(r.limit),
          userId: optionalId(r.user_id, 'user_id'),
        });
        return {
          runs: page.runs.map(runProto),
          next_before_seq: page.nextBeforeSeq ?? 0,
          has_more: page.hasMore,
        };
      }),
    };
    const proto = loadProto().proto as unknown as HistoryProto;
    server.addService(HISTORY_SERVICE, proto.runstream.v1.History.service, handlers);
  }

  /** A unary handler: authenticate, run, answer; any error becomes the call's status. */
  #unary<Req, Res>(
    method: string,
    run: (p: Principal, req: Req) => Promise<Res>,
  ): grpc.handleUnaryCall<Req, Res> {
    return (call, callback) => {
      this.#o.auth
        .authenticate(bearerFromGrpc(call.metadata))
        .then((p) => run(p, call.request))
        .then(
          (res) => callback(null, res),
          (err: unknown) => {
            const e = toRunstreamError(err);
            if (e.grpcStatus === grpc.status.INTERNAL || e.grpcStatus === grpc.status.UNAVAILABLE) {
              this.#o.log.warn({ err, method }, 'history call failed');
            }
            const trailer = new grpc.Metadata();
            trailer.set('rs-error-code', e.code);
            callback({ code: e.grpcStatus, details: e.message, metadata: trailer });
          },
        );
    };
  }
}
