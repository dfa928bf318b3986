/** `runstream serve`: the broker, as `npm start` runs it (main.ts). */
import { EXIT_OK, parseFlags, type Subcommand } from './args.js';

const USAGE = `usage: runstream serve

Runs the broker: every role in RS_ROLES (ingest, persister, fanout; all by default), gRPC on
GRPC_PORT (50051), HTTP on HTTP_PORT (8080), against NATS_URL and DATABASE_URL. It is
configured by environment variables only: docs/operations.md#configuration lists them all.
Logs are JSON lines on stdout. SIGTERM / Ctrl-C shut it down gracefully.`;

export const serveCommand: Subcommand = {
  name: 'serve',
  summary: 'run the broker (configured by environment variables)',
  usage: USAGE,
  async run(argv, io) {
    if (!parseFlags(this, argv, {}, io)) return EXIT_OK;
    // Loaded here: the whole broker is 0.4 s of imports that the other commands, and
    // every `--help`, need not wait for.
    const { serve } = await import('../main.js');
    serve();
    // The broker owns the process from here: its signal handlers end it.
    await new Promise<never>(() => undefined);
    return EXIT_OK;
  },
};
