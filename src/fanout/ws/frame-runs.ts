/**
 * Server text frames written in runs: the frames a connection sends together (a catch-up
 * page's run, a delivery turn's events of one subscription) are framed here, per RFC 6455
 * §5.2, into one buffer that the socket writes as one chunk.
 *
 * Handed to `ws` one by one, each frame is two chunks (its header and its text) that the
 * socket gathers again in a writev: at catch-up speed that, and `ws`'s per-message work,
 * were a third of the broker's CPU. The frames are the ones `ws` would write (unmasked, FIN,
 * opcode 1; test/frame-runs.test.ts holds them to `ws`'s own bytes), so a client cannot tell.
 * `ws` never compresses here (perMessageDeflate is off), so its sender writes nothing of its
 * own but control frames, each in the order it is called, as the runs are.
 */

/**
 * Text frames at least this large are handed to `ws` on their own, not copied into a run.
 */
export const RUN_COPY_LIMIT = 64 * 1024;

/** Bytes of the header of a server frame whose payload is `length` bytes. */
export function headerLength(length: number): number {
  return length < 126 ? 2 : length < 65_536 ? 4 : 10;
}

/** Writes the header of an unmasked, final text frame of `length` payload bytes at `at`; returns its end. */
export function writeHeader(target: Buffer, at: number, length: number): number {
  target[at] = 0x81; // FIN, opcode 1 (text)
  if (length < 126) {
    target[at + 1] = length;
    return at + 2;
  }
  if (length < 65_536) {
    target[at + 1] = 126;
    target.writeUInt16BE(length, at + 2);
    return at + 4;
  }
  target[at + 1] = 127;
  target.writeUInt32BE(Math.floor(length / 2 ** 32), at + 2);
  target.writeUInt32BE(length >>> 0, at + 6);
  return at + 10;
}

/**
 * The frames `texts[from, to)` as one buffer: each one's header, then its UTF-8 bytes. `bytes[i]`
 * is the UTF-8 length of `texts[i]` (the send queue has measured it already).
 */
export function encodeTextFrames(
  texts: readonly string[],
  bytes: readonly number[],
  from = 0,
  to = texts.length,
): Buffer {
  let total = 0;
  for (let i = from; i < to; i++) total += headerLength(bytes[i] as number) + (bytes[i] as number);
  const out = Buffer.allocUnsafe(total);
  let at = 0;
  for (let i = from; i < to; i++) {
    const n = bytes[i] as number;
    at = writeHeader(out, at, n);
    at += out.write(texts[i] as string, at, n, 'utf8');
  }
  if (at !== total) throw new Error(`frame run of ${total} bytes filled ${at}`);
  return out;
}

/**
 * A run's frames as the chunks to write, in order: texts framed here, those next to each other
 * in one buffer; a Buffer is a whole frame already (a shared event frame: frames.ts), written as
 * it is, so that the one copy serves every connection it goes to.
 */
export function runChunks(frames: readonly (string | Buffer)[], bytes: readonly number[]): Buffer[] {
  const chunks: Buffer[] = [];
  let from = 0;
  for (let i = 0; i <= frames.length; i++) {
    const f = frames[i];
    if (typeof f === 'string') continue;
    if (i > from) chunks.push(encodeTextFrames(frames as readonly string[], bytes, from, i));
    if (f !== undefined) chunks.push(f);
    from = i + 1;
  }
  return chunks;
}
