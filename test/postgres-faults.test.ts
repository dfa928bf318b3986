// Postgres dropping the broker's connections is normal: backends terminated, the server
// restarted fast or immediately. The broker (a child process, so a crash shows as an exit)
// stays up, recovers by itself, and stores every acknowledged event once, gap-free.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { type AckLevel, type Event, IngestClient } from '../src/client/ingest-client.js';
import { tokenEvent } from './helpers/events.js';
import {
  brokerConfig,
  expectGapFree,
  randomName,
  spawnBroker,
  startServers,
  threadRows,
} from './helpers/stack.js';
import { waitFor } from './helpers/wait.js';

/** Publishes batches round-robin over threads until stopped; a failed batch is retried with the same ids. */
class Producer {
  readonly acked = new Map<string, Set<string>>();
  #stop = false;
  #persistedAcks = 0;
  readonly done: Promise<void>;

  constructor(
    readonly client: IngestClient,
    readonly threads: readonly string[],
  ) {
    for (const t of threads) this.acked.set(t, new Set());
    this.done = this.#run();
  }

  get persistedAcks(): number {
    return this.#persistedAcks;
  }

  async #run(): Promise<void> {
    let i = 0;
    while (!this.#stop) {
      const t = this.threads[i % this.threads.length] as string;
      const batch: Event[] = Array.from({ length: 10 }, (_, k) => tokenEvent(t, i * 10 + k));
      const ack: AckLevel = i % 2 === 0 ? 'PERSISTED' : 'ACCEPTED';
      let ok = false;
      while (!ok && !this.#stop) {
        try {
          await this.client.publish(batch, ack, 5_000);
          ok = true;
        } catch {
          await new Promise((r) => setTimeout(r, 100));
        }
      }
      if (!ok) return;
      for (const e of batch) this.acked.get(t)?.add(e.event_id as string);
      if (ack === 'PERSISTED') this.#persistedAcks++;
      i++;
    }
  }

  async stop(): Promise<void> {
    this.#stop = true;
    await this.done;
  }
}

test('terminated backends and fast / immediate restarts under load: the broker stays up and loses nothing', async () => {
  await using servers = await startServers({ own: true });
  const config = brokerConfig(servers);
  const broker = await spawnBroker(config, { RS_PERSIST_BATCH_MAX: '20' });
  let output = '';
  const keep = (d: Buffer): void => {
    output = (output + d.toString()).slice(-200_000);
  };
  broker.child.stdout?.on('data', keep);
  broker.child.stderr?.on('data', keep);
  const client = new IngestClient(`127.0.0.1:${broker.grpcPort}`);
  const threads = [randomName('t-'), randomName('t-'), randomName('t-')];
  const producer = new Producer(client, threads);
  const alive = (): void =>
    assert.equal(broker.child.exitCode, null, `the broker exited:\n${output.slice(-4000)}`);
  /** Waits until PERSISTED acks flow again after a fault. */
  const recovered = async (what: string): Promise<void> => {
    const before = producer.persistedAcks;
    await waitFor(() => producer.persistedAcks >= before + 3, { timeoutMs: 60_000, what }).catch((err) => {
      throw new Error(`${(err as Error).message}; broker log:\n${output.slice(-4000)}`);
    });
    alive();
  };
  try {
    await recovered('first acks');
    for (let n = 0; n < 6; n++) {
      await servers.db.query(
        `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
          WHERE application_name = 'runstream' AND pid <> pg_backend_pid()`,
      );
      await recovered(`acks after pg_terminate_backend #${n + 1}`);
    }
    await servers.pg.restart('immediate');
    await recovered('acks after an immediate restart');
    await servers.pg.restart('fast');
    await recovered('acks after a fast restart');
  } finally {
    await producer.stop();
  }
  alive();
  for (const t of threads) {
    const want = producer.acked.get(t) as Set<string>;
    await waitFor(async () => (await threadRows(servers.db, t).catch(() => [])).length >= want.size, {
      timeoutMs: 60_000,
      what: `${want.size} events of ${t} stored`,
    });
    const rows = await threadRows(servers.db, t);
    const stored = new Set(rows.map((r) => r.event_id));
    const lost = [...want].filter((id) => !stored.has(id));
    assert.deepEqual(lost, [], `acknowledged events of ${t} missing`);
    assert.equal(rows.length, stored.size, 'no event stored twice');
    expectGapFree(rows.map((r) => r.seq));
  }
  client.close();
  await broker.stop();
  assert.doesNotMatch(output, /Unhandled 'error' event/);
});
