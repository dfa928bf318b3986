/**
 * Preload (`node --import`) for a broker under benchmark. Node 20 refuses `--cpu-prof`
 * in NODE_OPTIONS and spawnBroker() takes no node flags, but `--import` is allowed, so:
 *  - `RS_BENCH_PROBE_FILE`: at exit, write the process's event-loop delay (how long a
 *    ready callback waited for the loop, what a pg or NATS reply waits before it is
 *    handled) as JSON;
 *  - `RS_BENCH_CPU_PROFILE`: CPU-profile the whole process and write a V8 `.cpuprofile`
 *    there at exit (open it in Chrome DevTools or VS Code).
 */
import { writeFileSync } from 'node:fs';
import { Session } from 'node:inspector';
import { monitorEventLoopDelay } from 'node:perf_hooks';

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
}

const probeFile = process.env.RS_BENCH_PROBE_FILE;
if (probeFile) {
  const delay = monitorEventLoopDelay({ resolution: RESOLUTION_MS });
  delay.enable();
  const seconds: LoopDelaySecond[] = [];
  const ms = (ns: number) => Math.max(0, Math.round((ns / NS_PER_MS - RESOLUTION_MS) * 10) / 10);
  const sample = () => {
    if (delay.count > 0) {
      seconds.push({
        at: Date.now(),
        mean: ms(delay.mean),
        p99: ms(delay.percentile(99)),
        max: ms(delay.max),
      });
    }
    delay.reset();
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
  session.post('Profiler.setSamplingInterval', { interval: 1000 });
  session.post('Profiler.start');
  // The in-process inspector answers synchronously, so this works in an 'exit' listener.
  process.on('exit', () => {
    session.post('Profiler.stop', (err, result) => {
      if (!err) writeFileSync(profileFile, JSON.stringify(result.profile));
    });
  });
}
