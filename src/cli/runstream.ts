#!/usr/bin/env node
/**
 * The `runstream` command (package.json `bin`): `runstream <subcommand> [flags]`, each
 * subcommand in its own module, each with `--help`. Exit codes: 0 done, 1 failed, 2 bad
 * input on the command line (the message names the flag).
 */
import { EXIT_OK, EXIT_USAGE, type Subcommand } from './args.js';
import { exportCommand, importCommand } from './export-import.js';
import { migrateCommand } from './migrate.js';
import { publishCommand } from './publish.js';
import { processIo, runCommand } from './run.js';
import { serveCommand } from './serve.js';
import { tailCommand } from './tail.js';
import { runsCommand, threadsCommand } from './threads.js';
import { tokenCommand } from './token.js';

const SUBCOMMANDS: readonly Subcommand[] = [
  serveCommand,
  tailCommand,
  publishCommand,
  tokenCommand,
  migrateCommand,
  threadsCommand,
  runsCommand,
  exportCommand,
  importCommand,
];

function usage(): string {
  const width = Math.max(...SUBCOMMANDS.map((c) => c.name.length));
  return [
    'usage: runstream <command> [flags]',
    '',
    'commands:',
    ...SUBCOMMANDS.map((c) => `  ${c.name.padEnd(width)}  ${c.summary}`),
    '',
    '`runstream <command> --help` describes a command and its flags. The client commands reach',
    'the broker at RS_URL (HTTP, default http://127.0.0.1:8080) and RS_GRPC_TARGET (gRPC, default',
    '127.0.0.1:50051), with the token in RS_TOKEN; their flags win.',
  ].join('\n');
}

async function main(argv: readonly string[]): Promise<number> {
  const io = processIo();
  const [name, ...rest] = argv;
  if (name === undefined || name === '--help' || name === '-h' || name === 'help') {
    (name === undefined ? io.err : io.out)(`${usage()}\n`);
    return name === undefined ? EXIT_USAGE : EXIT_OK;
  }
  const cmd = SUBCOMMANDS.find((c) => c.name === name);
  if (!cmd) {
    io.err(`runstream: unknown command ${JSON.stringify(name)}\n\n${usage()}\n`);
    return EXIT_USAGE;
  }
  return runCommand(cmd, rest, io, `runstream ${cmd.name}`);
}

void main(process.argv.slice(2)).then((code) => {
  // `serve` never returns; the others exit once stdout has drained.
  process.stdout.write('', () => process.exit(code));
});
