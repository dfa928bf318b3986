// Node >= 20.4 (we run 20.20) defines Symbol.asyncDispose; TS downlevels `await using` (target ES2022) and
// looks the symbol up at run time, so make sure it exists on older runtimes too.
(Symbol as { asyncDispose?: symbol }).asyncDispose ??= Symbol.for('Symbol.asyncDispose');
(Symbol as { dispose?: symbol }).dispose ??= Symbol.for('Symbol.dispose');

export { type NatsServerHandle, type StartNatsOptions, startNatsServer } from './nats-server.js';
export {
  type PostgresHandle,
  type PostgresTimings,
  postgresTimings,
  type StartPostgresOptions,
  startPostgres,
} from './postgres.js';
export { type WaitForOptions, waitFor } from './wait.js';
