/**
 * Preload (`node --import`) for a broker under benchmark. Node 20 refuses `--cpu-prof`
 * in NODE_OPTIONS and spawnBroker() takes no node flags, but `--import` is allowed, so:
 *  - `RS_BENCH_PROBE_FILE`: at exit, write the process's event-loop delay (how long a
 *    ready callback waited for the loop, what a pg or NATS reply waits before it is
 *    handled) as JSON;
 *  - `RS_BENCH_CPU_PROFILE`: CPU-profile the whole process and write a V8 `.cpuprofile`
 *    there at exit (open it in Chrome DevTools or VS Code).
 *  - `RS_BENCH_HEAP_PROFILE_DIR`: sample what the process allocates, garbage included (V8's
 *    sampling heap profiler keeps only live objects unless told otherwise), and write a
 *    `.heapprofile` into that directory at exit, named by the process's roles and pid
 *    (`--env RS_BENCH_HEAP_PROFILE_DIR=…`; summarise with `node dist/bench/heap-summary.js`).
 */
import { writeFileSync } from 'node:fs';
import { Session } from 'node:inspector';
import { monitorEventLoopDelay, PerformanceObserver } from 'node:perf_hooks';

const NS_PER_MS = 1e6;
const RESOLUTION_MS = 10;

/**
 * One second of event-loop delay, in ms: how much later than due a 10 ms timer ran
 * (Node's monitorEventLoopDelay records the whole interval; the 10 ms are taken off).
 */
export interface LoopDelaySecond {
  /** Date.now() at the end of the second. */
  readonly at: number;
  readonly mean: number;
  readonly p99: number;
  readonly max: number;
  /** Garbage-collection pauses that ended in this second: how many, their sum and the longest, ms. */
  readonly gcCount: number;
  readonly gcMs: number;
  readonly gcMaxMs: number;
}

const probeFile = process.env.RS_BENCH_PROBE_FILE;
if (probeFile) {
  const delay = monitorEventLoopDelay({ resolution: RESOLUTION_MS });
  delay.enable();
  let gc = { count: 0, ms: 0, max: 0 };
  new PerformanceObserver((list) => {
    for (const e of list.getEntries()) {
      gc.count++;
      gc.ms += e.duration;
      gc.max = Math.max(gc.max, e.duration);
    }
  }).observe({ entryTypes: ['gc'] });
  const seconds: LoopDelaySecond[] = [];
  const round = (x: number) => Math.round(x * 10) / 10;
  const ms = (ns: number) => Math.max(0, Math.round((ns / NS_PER_MS - RESOLUTION_MS) * 10) / 10);
  const sample = () => {
    if (delay.count > 0) {
      seconds.push({
        at: Date.now(),
        mean: ms(delay.mean),
        p99: ms(delay.percentile(99)),
        max: ms(delay.max),
        gcCount: gc.count,
        gcMs: round(gc.ms),
        gcMaxMs: round(gc.max),
      });
    }
    delay.reset();
    gc = { count: 0, ms: 0, max: 0 };
  };
  setInterval(sample, 1_000).unref();
  process.on('exit', () => {
    sample();
    writeFileSync(probeFile, JSON.stringify(seconds));
  });
}

const profileFile = process.env.RS_BENCH_CPU_PROFILE;
if (profileFile) {
  const session = new Session();
  session.connect();
  session.post('Profiler.enable');
  // RS_BENCH_CPU_PROFILE_INTERVAL_US: a longer interval costs the process less (default 1 ms).
  const interval = Number(process.env.RS_BENCH_CPU_PROFILE_INTERVAL_US) || 1000;
  session.post('Profiler.setSamplingInterval', { interval });
  session.post('Profiler.start');
  // The in-process inspector answers synchronously, so this works in an 'exit' listener.
  process.on('exit', () => {
    session.post('Profiler.stop', (err, result) => {
      if (!err) writeFileSync(profileFile, JSON.stringify(result.profile));
    });
  });
}

const heapDir = process.env.RS_BENCH_HEAP_PROFILE_DIR;
if (heapDir) {
  const session = new Session();
  session.connect();
  session.post('HeapProfiler.enable');
  session.post('HeapProfiler.startSampling', {
    samplingInterval: Number(process.env.RS_BENCH_HEAP_PROFILE_INTERVAL) || 32_768,
    includeObjectsCollectedByMajorGC: true,
    includeObjectsCollectedByMinorGC: true,
  });
  process.on('exit', () => {
    session.post('HeapProfiler.stopSampling', (err, result) => {
      const roles = (process.env.RS_ROLES ?? 'all').replace(/[^a-z,]/g, '').replace(/,/g, '+');
      if (!err)
        writeFileSync(`${heapDir}/${roles}-${process.pid}.heapprofile`, JSON.stringify(result.profile));
    });
  });
}
