import { pino } from 'pino';
import pretty from 'pino-pretty';

export type Logger = pino.Logger;

/** `json`: one JSON object per line (the default, for machines); `pretty`: for a person reading. */
export type LogFormat = 'json' | 'pretty';

/** The process logger on stdout (pino): JSON lines, or readable lines (pino-pretty, synchronous). */
export function createLogger(
  level: string,
  name = 'runstream',
  format: LogFormat = 'json',
  /** Fields on every line (a worker's `worker`). */
  bindings: Record<string, string> = {},
): Logger {
  const withBindings = (l: Logger): Logger => (Object.keys(bindings).length > 0 ? l.child(bindings) : l);
  if (format === 'json') return withBindings(pino({ name, level }));
  return withBindings(
    pino(
      { name, level },
      pretty({ sync: true, translateTime: 'SYS:HH:MM:ss.l', ignore: 'pid,hostname,name', singleLine: true }),
    ),
  );
}
