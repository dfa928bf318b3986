/**
 * Runs the `runstream` command as a child process (`node dist/src/cli/runstream.js`), as a
 * user would, and collects its exit code and output.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';

export const RUNSTREAM_JS = fileURLToPath(new URL('../../src/cli/runstream.js', import.meta.url));

export interface CliResult {
  readonly code: number | null;
  readonly stdout: string;
  readonly stderr: string;
}

export interface CliOptions {
  readonly env?: Record<string, string | undefined>;
  /** Written to stdin, which is then closed. */
  readonly input?: string;
  /** Killed (SIGKILL) after this long: a hung command fails its test instead of the suite. */
  readonly killAfterMs?: number;
}

/** A running command; `done` settles when it exits. */
export interface CliProcess {
  readonly child: ChildProcess;
  readonly done: Promise<CliResult>;
  /** Output so far. */
  stdout(): string;
  stderr(): string;
}

export function startCli(args: readonly string[], o: CliOptions = {}): CliProcess {
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries({ ...process.env, ...o.env })) if (v !== undefined) env[k] = v;
  const child = spawn(process.execPath, [RUNSTREAM_JS, ...args], { env, stdio: ['pipe', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout?.on('data', (d: Buffer) => {
    stdout += d.toString();
  });
  child.stderr?.on('data', (d: Buffer) => {
    stderr += d.toString();
  });
  child.stdin?.on('error', () => undefined);
  if (o.input !== undefined) child.stdin?.end(o.input);
  else child.stdin?.end();
  const killer = setTimeout(() => child.kill('SIGKILL'), o.killAfterMs ?? 60_000);
  const done = new Promise<CliResult>((resolve) => {
    child.once('close', (code) => {
      clearTimeout(killer);
      resolve({ code, stdout, stderr });
    });
  });
  process.once('exit', () => child.kill('SIGKILL'));
  return { child, done, stdout: () => stdout, stderr: () => stderr };
}

export function runCli(args: readonly string[], o: CliOptions = {}): Promise<CliResult> {
  return startCli(args, o).done;
}
