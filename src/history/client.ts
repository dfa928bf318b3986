/**
 * A small typed client for `runstream.v1.History`, used by the tests and by Node
 * backends. Other languages generate theirs from proto/runstream/v1/history.proto.
 */
import * as grpc from '@grpc/grpc-js';
import type { ProtoGrpcType as HistoryProto } from '../gen/history.js';
import type { CountMessagesRequest } from '../gen/runstream/v1/CountMessagesRequest.js';
import type { DeleteResponse__Output } from '../gen/runstream/v1/DeleteResponse.js';
import type { DeleteRunRequest } from '../gen/runstream/v1/DeleteRunRequest.js';
import type { DeleteThreadRequest } from '../gen/runstream/v1/DeleteThreadRequest.js';
import type { GetRunRequest } from '../gen/runstream/v1/GetRunRequest.js';
import type { HistoryClient as RawHistoryClient } from '../gen/runstream/v1/History.js';
import type { ListChatMessagesRequest } from '../gen/runstream/v1/ListChatMessagesRequest.js';
import type { ListChatMessagesResponse__Output } from '../gen/runstream/v1/ListChatMessagesResponse.js';
import type { ListEventsRequest } from '../gen/runstream/v1/ListEventsRequest.js';
import type { ListEventsResponse__Output } from '../gen/runstream/v1/ListEventsResponse.js';
import type { ListMessagesByRunRequest } from '../gen/runstream/v1/ListMessagesByRunRequest.js';
import type { ListMessagesRequest } from '../gen/runstream/v1/ListMessagesRequest.js';
import type { ListRunsRequest } from '../gen/runstream/v1/ListRunsRequest.js';
import type { ListRunsResponse__Output } from '../gen/runstream/v1/ListRunsResponse.js';
import type { Run__Output } from '../gen/runstream/v1/Run.js';
import { loadProto } from '../proto.js';

export class HistoryClient implements Disposable {
  readonly raw: RawHistoryClient;
  readonly #metadata: grpc.Metadata;

  /** `token`: sent as `authorization: Bearer <token>` on every call. */
  constructor(target: string, token?: string) {
    const proto = loadProto().proto as unknown as HistoryProto;
    this.raw = new proto.runstream.v1.History(target, grpc.credentials.createInsecure());
    this.#metadata = new grpc.Metadata();
    if (token !== undefined) this.#metadata.set('authorization', `Bearer ${token}`);
  }

  #call<Req, Res>(method: keyof RawHistoryClient, req: Req): Promise<Res> {
    return new Promise((resolve, reject) => {
      const fn = this.raw[method] as unknown as (
        req: Req,
        md: grpc.Metadata,
        opts: grpc.CallOptions,
        cb: (err: grpc.ServiceError | null, res?: Res) => void,
      ) => void;
      fn.call(this.raw, req, this.#metadata, { deadline: Date.now() + 30_000 }, (err, res) =>
        err ? reject(err) : resolve(res as Res),
      );
    });
  }

  listEvents(req: ListEventsRequest): Promise<ListEventsResponse__Output> {
    return this.#call('ListEvents', req);
  }
  listMessages(req: ListMessagesRequest): Promise<ListEventsResponse__Output> {
    return this.#call('ListMessages', req);
  }
  listMessagesByRun(req: ListMessagesByRunRequest): Promise<ListEventsResponse__Output> {
    return this.#call('ListMessagesByRun', req);
  }
  async countMessages(req: CountMessagesRequest): Promise<number> {
    return (await this.#call<CountMessagesRequest, { count: number }>('CountMessages', req)).count;
  }
  listChatMessages(req: ListChatMessagesRequest): Promise<ListChatMessagesResponse__Output> {
    return this.#call('ListChatMessages', req);
  }
  deleteThread(req: DeleteThreadRequest): Promise<DeleteResponse__Output> {
    return this.#call('DeleteThread', req);
  }
  deleteRun(req: DeleteRunRequest): Promise<DeleteResponse__Output> {
    return this.#call('DeleteRun', req);
  }
  getRun(req: GetRunRequest): Promise<Run__Output> {
    return this.#call('GetRun', req);
  }
  listRuns(req: ListRunsRequest): Promise<ListRunsResponse__Output> {
    return this.#call('ListRuns', req);
  }

  close(): void {
    this.raw.close();
  }

  [Symbol.dispose](): void {
    this.close();
  }
}
