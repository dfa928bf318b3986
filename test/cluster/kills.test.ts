// The whole deployment on a 3-node NATS cluster (an R3 log), under load at both ack levels:
// two ingest+fan-out processes, two persister processes, producers that resend unacked
// requests with the same event ids, and a WebSocket subscriber on each fan-out node that
// resumes from its cursor. Mid-load, one after another, kill -9: the log stream's leader
// node, a follower node, a persister process, an ingest process (each started again). Then
// every acked event must be stored once, gap-free, in send order, and every subscriber exact.
// Also: a broker started during a leader election starts and stores.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { partitionStream } from '../../src/log/streams.js';
import { type AckedEvent, checkThread, sumFaults, type ThreadReport } from '../faults/checker.js';
import {
  catchUp,
  FaultBroker,
  ingestClient,
  LiveSubscriber,
  Load,
  publish,
  recordRow,
  settleStored,
} from '../faults/harness.js';
import { randomName } from '../helpers/stack.js';
import { waitFor } from '../helpers/wait.js';
import { CLUSTER_PARTITIONS, type ClusterServers, startClusterServers } from './stack.js';

const DOWN_MS = 5_000;
const SETTLE_AFTER_MS = 3_000;

interface Deployment extends AsyncDisposable {
  readonly ingest: FaultBroker[];
  readonly persisters: FaultBroker[];
  readonly stream: string;
  readonly env: Record<string, string>;
}

async function startDeployment(servers: ClusterServers): Promise<Deployment> {
  const env = {
    RS_STREAM: randomName('RS_'),
    RS_SUBJECT_PREFIX: randomName('rs'),
    RS_STREAM_REPLICAS: '3',
    RS_PARTITIONS: String(CLUSTER_PARTITIONS),
  };
  const ingest: FaultBroker[] = [];
  const persisters: FaultBroker[] = [];
  // The first creates the stream; the others find it.
  ingest.push(await FaultBroker.start(servers, { ...env, RS_ROLES: 'ingest,fanout' }));
  ingest.push(await FaultBroker.start(servers, { ...env, RS_ROLES: 'ingest,fanout' }));
  for (let i = 0; i < 2; i++)
    persisters.push(await FaultBroker.start(servers, { ...env, RS_ROLES: 'persister' }));
  return {
    ingest,
    persisters,
    // "The stream": partition 0's; its leader node often leads others too.
    stream: partitionStream(env.RS_STREAM, 0),
    env,
    async [Symbol.asyncDispose]() {
      await Promise.all([...ingest, ...persisters].map((b) => b[Symbol.asyncDispose]()));
    },
  };
}

test('kill -9 of the stream leader, a follower, a persister and an ingest process under load: exact', async () => {
  const started = Date.now();
  await using servers = await startClusterServers();
  await using d = await startDeployment(servers);
  const accepted = Array.from({ length: 3 }, () => randomName('ta-'));
  const persisted = Array.from({ length: 3 }, () => randomName('tp-'));
  const threads = [...accepted, ...persisted];
  const subs = d.ingest.map((b) => new LiveSubscriber(b.wsUrl, threads));
  await Promise.all(subs.map((s) => s.start()));
  const ingestA = d.ingest[0] as FaultBroker;
  const ingestP = d.ingest[1] as FaultBroker;
  const loadA = new Load({
    target: ingestA.grpcTarget,
    threads: accepted,
    ack: 'ACCEPTED',
    eventsPerSecond: 150,
  }).start();
  const loadP = new Load({
    target: ingestP.grpcTarget,
    threads: persisted,
    ack: 'PERSISTED',
    eventsPerSecond: 150,
    deadlineMs: 40_000,
  }).start();
  const kills: { what: string; at: number }[] = [];
  const notes: string[] = [];
  const recover = async (what: string, at: number): Promise<void> => {
    await waitFor(
      () => loadP.allThreadsAckedMs(at) !== undefined && loadA.allThreadsAckedMs(at) !== undefined,
      {
        timeoutMs: 90_000,
        intervalMs: 100,
        what: `every thread acked again after: ${what}`,
      },
    );
    await sleep(SETTLE_AFTER_MS);
  };
  try {
    await loadP.waitForAcks(5);
    await sleep(3_000);

    const leader = await servers.nats.waitForLeader(d.stream);
    let at = Date.now();
    await servers.nats.kill(leader);
    kills.push({ what: `stream leader node ${servers.nats.nameOf(leader)}`, at });
    await sleep(DOWN_MS);
    await servers.nats.restart(leader);
    await recover('stream leader kill', at);

    const now = await servers.nats.waitForLeader(d.stream);
    const follower = [0, 1, 2].find((i) => i !== now) as number;
    at = Date.now();
    await servers.nats.kill(follower);
    kills.push({ what: `follower node ${servers.nats.nameOf(follower)}`, at });
    await sleep(DOWN_MS);
    await servers.nats.restart(follower);
    await recover('follower kill', at);

    const persister = d.persisters[0] as FaultBroker;
    at = Date.now();
    await persister.kill();
    kills.push({ what: 'persister process', at });
    await sleep(DOWN_MS);
    await persister.restart();
    await recover('persister kill', at);

    at = Date.now();
    await ingestP.kill();
    kills.push({ what: 'ingest process (of the PERSISTED producer)', at });
    await sleep(DOWN_MS / 5);
    await ingestP.restart();
    await recover('ingest kill', at);
  } finally {
    await Promise.all([loadA.stop(), loadP.stop()]);
  }
  const acked = new Map<string, Map<string, AckedEvent>>([...loadA.acked, ...loadP.acked]);
  const stored = await settleStored(servers.db, acked, subs, 120_000);
  const caught = await catchUp(ingestA.wsUrl, threads);
  for (const s of subs) s.close();
  const reports: ThreadReport[] = threads.map((t) => {
    const [first, ...others] = subs.map((s) =>
      checkThread({
        thread: t,
        acked: acked.get(t) as Map<string, AckedEvent>,
        stored: stored.get(t) ?? [],
        live: (s.delivered.get(t) ?? []).map((x) => x.ev),
        catchUp: caught.get(t) ?? [],
      }),
    );
    const r = first as ThreadReport;
    return {
      ...r,
      live: sumFaults(r.live, ...others.map((o) => o.live)),
      examples: [...r.examples, ...others.flatMap((o) => o.examples)],
    };
  });
  const firstAck = kills.map((k) => loadP.ackRecoveryMs(k.at) ?? -1);
  const everyThread = kills.map((k) => loadP.allThreadsAckedMs(k.at) ?? -1);
  kills.forEach((k, i) => {
    notes.push(
      `${k.what}: next PERSISTED ack ${firstAck[i]} ms, every PERSISTED thread ${everyThread[i]} ms`,
    );
  });
  const reconnects = subs.map((s) => s.reconnects).join('/');
  notes.push(
    `subscribers reconnected ${reconnects}×; ACCEPTED ${loadA.ackedCount}, PERSISTED ${loadP.ackedCount}`,
  );
  recordRow(
    {
      row: 'cluster: kill -9 leader, follower, persister, ingest',
      injects:
        '3-node NATS, R3 log, 2 ingest+fan-out and 2 persister processes; kill -9 in turn the stream leader node, a follower node, a persister, an ingest process, each started again',
      ack: 'ACCEPTED+PERSISTED',
      ackRecoveryMs: everyThread,
      deliveryRecoveryMs: kills.map((k) =>
        Math.max(...subs.map((s) => s.deliveryRecoveryMs(k.at, loadP) ?? -1)),
      ),
      notes: notes.join('; '),
      seconds: Math.round((Date.now() - started) / 1000),
    },
    reports,
    subs.reduce((n, s) => n + s.deliveredCount(), 0),
    {
      alarms: [...d.ingest, ...d.persisters].flatMap((b) => b.alarms),
      logTail: d.ingest.map((b) => b.logTail(20)).join('\n'),
    },
  );
});

test('a broker started right after the stream leader node dies starts and stores', async () => {
  const started = Date.now();
  await using servers = await startClusterServers();
  await using d = await startDeployment(servers);
  const leader = await servers.nats.waitForLeader(d.stream);
  const meta = await servers.nats.waitForMetaLeader();
  // The node leading both the stream and the meta group, when one does: the longest election.
  const victim = leader;
  const killedAt = Date.now();
  await servers.nats.kill(victim);
  await using late = await FaultBroker.start(servers, { ...d.env, RS_ROLES: 'ingest,fanout' });
  const startMs = Date.now() - killedAt;
  const client = ingestClient(late.grpcTarget);
  const thread = randomName('te-');
  try {
    const events = Array.from({ length: 10 }, (_, i) => ({
      thread_id: thread,
      run_id: 'run-1',
      event_id: `e${i}`,
      event_type: 'ai_chunk',
      category: 'MESSAGE' as const,
      content_json: `{"i":${i}}`,
    }));
    const acks = await publish(client, events, 'PERSISTED', 60_000);
    const ackMs = Date.now() - killedAt;
    assert.deepEqual(
      acks.map((a) => Number(a.seq)),
      events.map((_, i) => i + 1),
    );
    const acked = new Map([[thread, new Map(acks.map((a, i) => [a.event_id, { i, seq: Number(a.seq) }]))]]);
    const stored = await settleStored(servers.db, acked, [], 60_000);
    const caught = await catchUp(late.wsUrl, [thread]);
    const report = checkThread({
      thread,
      acked: acked.get(thread) as Map<string, AckedEvent>,
      stored: stored.get(thread) ?? [],
      live: caught.get(thread) ?? [],
      catchUp: caught.get(thread) ?? [],
    });
    recordRow(
      {
        row: 'cluster: broker started during a leader election',
        injects: `kill -9 the stream leader node (${leader === meta ? 'also the meta leader' : 'not the meta leader'}), start an ingest+fan-out process at once`,
        ack: 'PERSISTED',
        ackRecoveryMs: [ackMs],
        deliveryRecoveryMs: [],
        notes: `started ${startMs} ms after the kill (logged 'runstream started'); first PERSISTED ack ${ackMs} ms after it`,
        seconds: Math.round((Date.now() - started) / 1000),
      },
      [report],
      report.stored,
      { alarms: late.alarms, logTail: late.logTail(30) },
    );
  } finally {
    client.close();
    await servers.nats.restart(victim);
  }
});
