import { pino } from 'pino';

export type Logger = pino.Logger;

/** The process logger: JSON lines on stdout (pino). */
export function createLogger(level: string, name = 'runstream'): Logger {
  return pino({ name, level });
}
