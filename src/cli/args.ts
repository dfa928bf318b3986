/**
 * What every `runstream` subcommand shares: its flags parsed strictly (`node:util`
 * parseArgs; an unknown flag or a missing value is a usage error naming the flag), value
 * checks that name the flag, `--help`, and where its output goes.
 */
import { type ParseArgsConfig, parseArgs } from 'node:util';
import { ID_PATTERN } from '../domain/ids.js';

/** Bad input on the command line: printed with the subcommand's usage, exit code 2. */
export class UsageError extends Error {
  override name = 'UsageError';
}

/** A failure after the input was accepted (the broker refused, a file is missing): exit code 1. */
export class CommandError extends Error {
  override name = 'CommandError';
}

export const EXIT_OK = 0;
export const EXIT_FAILED = 1;
export const EXIT_USAGE = 2;

/** Where a subcommand writes: results on `out`, notices and progress on `err`. */
export interface Io {
  out(text: string): void;
  err(text: string): void;
  /** stderr is a terminal: progress bars may redraw a line. */
  readonly errIsTty: boolean;
  readonly stdin: NodeJS.ReadableStream;
  /** Aborted on SIGINT / SIGTERM. */
  readonly signal: AbortSignal;
}

export interface Subcommand {
  readonly name: string;
  /** One line for `runstream --help`. */
  readonly summary: string;
  /** The whole `--help` text. */
  readonly usage: string;
  run(argv: readonly string[], io: Io): Promise<number>;
}

type Options = NonNullable<ParseArgsConfig['options']>;

/**
 * Parses `argv` against `options` (plus `--help`/`-h`). Returns undefined when help was
 * asked for (already printed). Throws {@link UsageError} naming the flag.
 */
export function parseFlags<O extends Options>(
  cmd: Pick<Subcommand, 'usage'>,
  argv: readonly string[],
  options: O,
  io: Io,
  positionals: { min: number; max: number; name: string } = { min: 0, max: 0, name: '' },
) {
  let parsed: ReturnType<typeof parseArgs<{ options: O; allowPositionals: true; strict: true }>>;
  try {
    parsed = parseArgs({
      args: [...argv],
      options: { ...options, help: { type: 'boolean', short: 'h' } } as O,
      allowPositionals: true,
      strict: true,
    });
  } catch (err) {
    throw new UsageError((err as Error).message);
  }
  if ((parsed.values as Record<string, unknown>).help === true) {
    io.out(`${cmd.usage}\n`);
    return undefined;
  }
  const n = parsed.positionals.length;
  if (n < positionals.min || n > positionals.max) {
    if (positionals.max === 0)
      throw new UsageError(`unexpected argument ${JSON.stringify(parsed.positionals[0])}`);
    throw new UsageError(
      n < positionals.min
        ? `${positionals.name} is required`
        : `unexpected argument ${JSON.stringify(parsed.positionals[positionals.max])}`,
    );
  }
  return parsed;
}

/** An integer flag in [min, max]; `fallback` when absent. */
export function intFlag(
  name: string,
  raw: string | undefined,
  fallback: number,
  min = 0,
  max = Number.MAX_SAFE_INTEGER,
): number {
  if (raw === undefined) return fallback;
  const n = Number(raw);
  if (!/^-?\d+$/.test(raw) || !Number.isSafeInteger(n) || n < min || n > max) {
    throw new UsageError(
      `--${name} ${JSON.stringify(raw)}: must be an integer${max === Number.MAX_SAFE_INTEGER ? ` ≥ ${min}` : ` in [${min}, ${max}]`}`,
    );
  }
  return n;
}

/** A value of a fixed set (case-insensitive); returned as written in `allowed`. */
export function choiceFlag<T extends string>(name: string, raw: string, allowed: readonly T[]): T {
  const hit = allowed.find((a) => a.toLowerCase() === raw.toLowerCase());
  if (hit === undefined) {
    throw new UsageError(`--${name} ${JSON.stringify(raw)}: must be one of ${allowed.join(', ')}`);
  }
  return hit;
}

/** A flag given several times or comma-separated: every value, trimmed, none empty. */
export function listFlag(raw: readonly string[] | undefined): string[] {
  return (raw ?? [])
    .flatMap((v) => v.split(','))
    .map((v) => v.trim())
    .filter((v) => v !== '');
}

/** A value that must match `pattern` (ids). */
export function patternFlag(name: string, raw: string, pattern: RegExp): string {
  if (!pattern.test(raw)) throw new UsageError(`--${name} ${JSON.stringify(raw)}: must match ${pattern}`);
  return raw;
}

/** The `<thread_id>` argument: an id, as the broker accepts one. */
export function threadIdArg(raw: string): string {
  if (!ID_PATTERN.test(raw))
    throw new UsageError(`<thread_id> ${JSON.stringify(raw)}: must match ${ID_PATTERN}`);
  return raw;
}

/** An http(s) base URL, without its trailing slash. */
export function httpUrlFlag(name: string, raw: string): string {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw new UsageError(`--${name} ${JSON.stringify(raw)}: not a URL`);
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') {
    throw new UsageError(`--${name} ${JSON.stringify(raw)}: must be an http:// or https:// URL`);
  }
  return raw.replace(/\/+$/, '');
}

/** The WebSocket endpoint of a broker's HTTP base: `http://h:8080` → `ws://h:8080/v1/ws`. */
export function wsUrlOf(httpUrl: string): string {
  const url = new URL(httpUrl);
  url.protocol = url.protocol === 'https:' ? 'wss:' : 'ws:';
  url.pathname = `${url.pathname.replace(/\/+$/, '')}/v1/ws`;
  return url.toString();
}

/** What to tell a user whose token was refused. */
export const TOKEN_HINT =
  'the broker requires a token: pass --token <jwt> or set RS_TOKEN (for development, `runstream token --thread <id>` mints one from RS_JWT_SECRET)';
