/**
 * Runs a {@link Subcommand} as the process: its output on stdout/stderr, Ctrl-C as its
 * abort signal (a second one exits at once), and its exit code: 2 for a usage error (printed
 * with the usage), 1 for a failure, 0 otherwise.
 */
import { CommandError, EXIT_FAILED, EXIT_USAGE, type Io, type Subcommand, UsageError } from './args.js';

/**
 * The process's {@link Io}. `signal` aborts on the first SIGINT / SIGTERM; the handlers are
 * installed when a command first asks for it (`serve` leaves the signals to the broker).
 */
export function processIo(): Io {
  let stop: AbortController | undefined;
  const signal = (): AbortSignal => {
    if (stop) return stop.signal;
    const c = new AbortController();
    stop = c;
    const onSignal = (): void => {
      if (c.signal.aborted) process.exit(130);
      c.abort();
    };
    process.on('SIGINT', onSignal);
    process.on('SIGTERM', onSignal);
    return c.signal;
  };
  // `runstream tail … | head` closes our stdout: that is the end, not an error.
  process.stdout.on('error', () => process.exit(0));
  return {
    out: (text) => {
      process.stdout.write(text);
    },
    err: (text) => {
      process.stderr.write(text);
    },
    errIsTty: process.stderr.isTTY === true,
    stdin: process.stdin,
    get signal() {
      return signal();
    },
  };
}

/** Runs `cmd` and returns its exit code, printing its error as `prefix: …`. */
export async function runCommand(
  cmd: Subcommand,
  argv: readonly string[],
  io: Io,
  prefix: string,
): Promise<number> {
  try {
    return await cmd.run(argv, io);
  } catch (err) {
    if (err instanceof UsageError) {
      io.err(`${prefix}: ${err.message}\n\n${cmd.usage}\n`);
      return EXIT_USAGE;
    }
    if (err instanceof CommandError) {
      io.err(`${prefix}: ${err.message}\n`);
      return EXIT_FAILED;
    }
    io.err(`${prefix}: ${err instanceof Error ? err.message : String(err)}\n`);
    return EXIT_FAILED;
  }
}

/** Runs `cmd` as the whole process, then exits with its code. */
export function runAsMain(cmd: Subcommand, argv: readonly string[], prefix: string): void {
  const io = processIo();
  void runCommand(cmd, argv, io, prefix).then((code) => {
    // Let stdout drain before exiting (a pipe may still hold our output).
    process.stdout.write('', () => process.exit(code));
  });
}
