/**
 * Load generators: producers, subscribers and bare baseline servers run as child
 * processes of their own (compiled `dist/bench/loadgen/<name>.js`), so their CPU is not
 * the bench's and a measurement drives the broker from outside, as real clients do.
 *
 * The protocol, over the fork IPC channel: the parent sends `{type:'start', ...args}`;
 * the child answers `{type:'ready', info}` once it is set up, then `{type:'result', result}`
 * or `{type:'error', message}`. The parent may send `{type:'go'}` to release a child that
 * waits for a common start. A child is killed on dispose, when the bench exits, and
 * exits by itself when the bench goes away (its IPC channel closes).
 */
import { type ChildProcess, fork } from 'node:child_process';
import { registerExitCleanup } from '../../test/helpers/proc.js';

export type ToLoadgen = { type: 'start'; args: unknown } | { type: 'go' };
export type FromLoadgen =
  | { type: 'ready'; info: unknown }
  | { type: 'result'; result: unknown }
  | { type: 'error'; message: string };

export interface Loadgen<Result = unknown, Info = unknown> extends AsyncDisposable {
  readonly pid: number;
  /** What the child said when it became ready (e.g. the port a baseline server listens on). */
  readonly info: Info;
  /** Releases a child waiting in `io.go`. */
  go(): void;
  /** The child's result; rejects on its error or exit, or after `timeoutMs`. */
  result(timeoutMs?: number): Promise<Result>;
  kill(): Promise<void>;
}

/** Forks `dist/bench/loadgen/<script>.js`, sends it `args`, and resolves once it is ready. */
export async function forkLoadgen<Result = unknown, Info = unknown>(
  script: string,
  args: object,
): Promise<Loadgen<Result, Info>> {
  const file = new URL(`../loadgen/${script}.js`, import.meta.url);
  const child = fork(file, [], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'], serialization: 'advanced' });
  const unregister = registerExitCleanup(() => child.kill('SIGKILL'));
  const exited = new Promise<string>((resolve) =>
    child.once('exit', (code, signal) => {
      unregister();
      resolve(`loadgen ${script} (pid ${child.pid}) exited: code ${code}, signal ${signal}`);
    }),
  );
  const next = (want: 'ready' | 'result'): Promise<unknown> =>
    new Promise((resolve, reject) => {
      const onMessage = (m: FromLoadgen) => {
        if (m.type === 'error') reject(new Error(`loadgen ${script}: ${m.message}`));
        else if (m.type === want) resolve(m.type === 'ready' ? m.info : m.result);
        else return;
        child.off('message', onMessage);
      };
      child.on('message', onMessage);
      void exited.then((why) => reject(new Error(why)));
    });
  // Both listeners exist before the child can answer, so no message is missed.
  const ready = next('ready');
  const result = next('result');
  result.catch(() => undefined); // observed by result(); unobserved when the caller only kills
  child.send({ type: 'start', args } satisfies ToLoadgen);

  const kill = async (): Promise<void> => {
    if (child.exitCode !== null || child.signalCode !== null) return;
    child.kill('SIGKILL');
    await exited;
  };
  let info: unknown;
  try {
    info = await ready;
  } catch (err) {
    await kill();
    throw err;
  }
  return {
    pid: child.pid as number,
    info: info as Info,
    go: () => send(child, { type: 'go' }),
    result: (timeoutMs = 600_000) => withDeadline(result as Promise<Result>, timeoutMs, script),
    kill,
    [Symbol.asyncDispose]: kill,
  };
}

function send(child: ChildProcess, m: ToLoadgen): void {
  if (child.connected) child.send(m);
}

async function withDeadline<T>(p: Promise<T>, ms: number, script: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([
      p,
      new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error(`loadgen ${script}: no result within ${ms} ms`)), ms);
      }),
    ]);
  } finally {
    clearTimeout(timer);
  }
}

/** What a load generator's main function gets besides its arguments. */
export interface LoadgenIo {
  /** Tells the parent the child is set up; `info` goes to `Loadgen.info`. */
  ready(info?: unknown): void;
  /** Resolves when the parent calls `go()`. */
  readonly go: Promise<void>;
}

/** The child side: runs `main` with the parent's arguments and reports its result or error. */
export function runLoadgen<Args, Result>(main: (args: Args, io: LoadgenIo) => Promise<Result>): void {
  const reply = (m: FromLoadgen) => process.send?.(m);
  process.once('disconnect', () => process.exit(0)); // the bench is gone
  let release: () => void = () => undefined;
  const go = new Promise<void>((resolve) => {
    release = resolve;
  });
  process.on('message', (m: ToLoadgen) => {
    if (m.type === 'go') release();
    if (m.type !== 'start') return;
    const io: LoadgenIo = { ready: (info) => reply({ type: 'ready', info }), go };
    main(m.args as Args, io).then(
      (result) => reply({ type: 'result', result }),
      (err: unknown) =>
        reply({ type: 'error', message: err instanceof Error ? (err.stack ?? err.message) : String(err) }),
    );
  });
}
