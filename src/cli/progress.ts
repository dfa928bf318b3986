/**
 * A progress line on stderr for the commands that move many events (`publish`, `import`,
 * `export`): redrawn in place on a terminal, at most every {@link PROGRESS_REDRAW_MS};
 * elsewhere (a pipe, a log, a test) only the final line is written.
 */
import type { Io } from './args.js';

export const PROGRESS_REDRAW_MS = 100;
const BAR_WIDTH = 30;

export class Progress {
  #done = 0;
  #lastDraw = 0;
  #drawn = false;

  constructor(
    readonly io: Io,
    readonly label: string,
    /** Undefined: a count without a bar. */
    readonly total: number | undefined,
  ) {}

  add(n = 1): void {
    this.#done += n;
    if (!this.io.errIsTty) return;
    const now = Date.now();
    if (now - this.#lastDraw < PROGRESS_REDRAW_MS && this.#done !== this.total) return;
    this.#lastDraw = now;
    this.#drawn = true;
    this.io.err(`\r${this.#line()}`);
  }

  get done(): number {
    return this.#done;
  }

  /** Ends the line (a terminal) or writes the final state (elsewhere). */
  finish(): void {
    if (this.#drawn) this.io.err(`\r${this.#line()}\n`);
  }

  #line(): string {
    if (this.total === undefined || this.total === 0) return `${this.label} ${this.#done}`;
    const filled = Math.round((BAR_WIDTH * this.#done) / this.total);
    return `${this.label} [${'#'.repeat(filled)}${'.'.repeat(BAR_WIDTH - filled)}] ${this.#done}/${this.total}`;
  }
}
