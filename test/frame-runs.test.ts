// A WebSocket connection writes the frames of a run (a catch-up page, a delivery turn) as one
// buffer it frames itself (src/fanout/ws/frame-runs.ts). Those bytes must be the ones `ws`
// writes for each frame — at every header size boundary and for multi-byte UTF-8 — and a real
// client must read them as the same messages, in order.
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { createRequire } from 'node:module';
import type { AddressInfo } from 'node:net';
import type { Duplex } from 'node:stream';
import { test } from 'node:test';
import { WebSocket, WebSocketServer } from 'ws';
import { encodeTextFrames, headerLength, runChunks } from '../src/fanout/ws/frame-runs.js';
import { eventFrame, sharedEventFrame } from '../src/fanout/ws/frames.js';

/** ws's own framing (not in its type declarations): the chunks it writes for one frame. */
const { Sender } = createRequire(import.meta.url)('ws') as {
  Sender: { frame(data: Buffer, options: Record<string, unknown>): Buffer[] };
};
function wsFrame(text: string): Buffer {
  const data = Buffer.from(text, 'utf8');
  return Buffer.concat(
    Sender.frame(data, { fin: true, opcode: 1, mask: false, readOnly: false, rsv1: false }),
  );
}

const bytesOf = (t: string) => Buffer.byteLength(t);

/** Payloads at each header boundary (2, 4 and 10 bytes), in ASCII and in 2-, 3- and 4-byte UTF-8. */
function payloads(): string[] {
  const out: string[] = [];
  for (const n of [0, 1, 125, 126, 127, 65_535, 65_536, 70_001]) out.push('a'.repeat(n));
  // Multi-byte texts whose byte length lands on a boundary while their length in chars does not.
  out.push(`${'é'.repeat(62)}x`); // 125 bytes
  out.push('é'.repeat(63)); // 126 bytes
  out.push(`${'€'.repeat(21845)}`); // 65,535 bytes
  out.push(`${'😀'.repeat(16384)}`); // 65,536 bytes
  out.push('{"seq":1,"content":"日本語 \\u0000 \\" 😀"}');
  return out;
}

test('a run is the bytes ws writes for each of its frames, back to back', () => {
  const texts = payloads();
  const bytes = texts.map(bytesOf);
  assert.deepEqual(
    bytes.slice(8, 12),
    [125, 126, 65_535, 65_536],
    'the multi-byte payloads land on the boundaries',
  );
  for (const [i, t] of texts.entries()) {
    const n = bytes[i] as number;
    assert.equal(headerLength(n), wsFrame(t).length - n, `header of ${n} bytes`);
    assert.deepEqual(encodeTextFrames([t], [n]), wsFrame(t), `frame of ${n} bytes`);
  }
  assert.deepEqual(encodeTextFrames(texts, bytes), Buffer.concat(texts.map(wsFrame)));
  assert.deepEqual(encodeTextFrames([], []), Buffer.alloc(0));
});

/** An event as fan-out shares it between subscribers, its text as bytes (log/announcements.ts). */
function sharedEvent(json: string): {
  json(): string;
  bytes: Buffer;
  frame?: { subId: string; bytes: Buffer };
} {
  return { json: () => json, bytes: Buffer.from(json, 'utf8') };
}

test("a shared event frame is the whole frame ws writes for the event's text, built once per subscription id", () => {
  const around = eventFrame('s1', '').length; // ASCII: its bytes
  const texts = [125, 126, 127, 65_535, 65_536, 70_001].map((n) => `{"t":"${'a'.repeat(n - around - 8)}"}`);
  texts.push('{"t":"日本語 😀 \\u0000 \\""}');
  for (const json of texts) {
    const e = sharedEvent(json);
    const frame = sharedEventFrame('s1', e);
    assert.deepEqual(
      frame,
      wsFrame(eventFrame('s1', json)),
      `a frame of ${bytesOf(eventFrame('s1', json))} bytes`,
    );
    assert.equal(sharedEventFrame('s1', e), frame, 'the same Buffer for the same id');
    const other = sharedEventFrame('sub "β"', e);
    assert.deepEqual(other, wsFrame(eventFrame('sub "β"', json)));
    // An event without bytes (a catch-up row's text) frames the same.
    assert.deepEqual(sharedEventFrame('s1', { json: () => json }), frame);
  }
  assert.deepEqual(
    texts.slice(0, 6).map((j) => bytesOf(eventFrame('s1', j))),
    [125, 126, 127, 65_535, 65_536, 70_001],
    'the frames land on the header boundaries',
  );
});

test('a run of texts and whole frames is written in order: the texts framed, next ones in one chunk', () => {
  const texts = ['a', 'é'.repeat(63), '{"x":1}', 'b'.repeat(200), 'c'];
  const whole = [wsFrame('whole-1'), wsFrame('日本語'.repeat(30))];
  const frames: (string | Buffer)[] = [
    whole[0] as Buffer,
    texts[0] as string,
    texts[1] as string,
    whole[1] as Buffer,
  ];
  frames.push(texts[2] as string, texts[3] as string, texts[4] as string, whole[0] as Buffer);
  const sizes = frames.map((f) => (typeof f === 'string' ? bytesOf(f) : f.length));
  const chunks = runChunks(frames, sizes);
  assert.equal(chunks.length, 5, 'whole, 2 texts, whole, 3 texts, whole');
  assert.equal(chunks[0], whole[0], 'a whole frame is written as it is, not copied');
  assert.deepEqual(
    Buffer.concat(chunks),
    Buffer.concat(frames.map((f) => (typeof f === 'string' ? wsFrame(f) : f))),
  );
  assert.deepEqual(runChunks([], []), []);
  assert.deepEqual(runChunks(['only'], [4]), [wsFrame('only')]);
});

test('a byte count that is not the text’s is refused, not written as a corrupt frame', () => {
  assert.throws(() => encodeTextFrames(['é'], [1]), /frame run of 3 bytes filled 2/);
  assert.throws(() => encodeTextFrames(['ab'], [3]), /frame run of 5 bytes filled 4/);
});

test('a real client reads a run written on the socket as the same messages, in order', async () => {
  const wss = new WebSocketServer({ port: 0, host: '127.0.0.1' });
  await once(wss, 'listening');
  try {
    const texts = payloads();
    wss.on('connection', (ws) => {
      const socket = (ws as unknown as { _socket: Duplex })._socket;
      // Split in two runs with a frame sent by ws itself between them: the order holds. The
      // second run holds whole frames between its texts, as shared event frames are.
      socket.write(encodeTextFrames(texts.slice(0, 7), texts.slice(0, 7).map(bytesOf)));
      ws.send('between');
      const rest = texts.slice(7).map((t, i) => (i % 2 === 0 ? wsFrame(t) : t));
      for (const c of runChunks(
        rest,
        rest.map((f) => (typeof f === 'string' ? bytesOf(f) : f.length)),
      )) {
        socket.write(c);
      }
      ws.close(1000, 'done');
    });
    const client = new WebSocket(`ws://127.0.0.1:${(wss.address() as AddressInfo).port}`);
    const got: string[] = [];
    client.on('message', (data, isBinary) => {
      assert.equal(isBinary, false);
      got.push(String(data));
    });
    client.on('error', () => undefined);
    // Corrupt lengths would leave the client waiting for bytes that never come: cut it off.
    const guard = setTimeout(() => client.terminate(), 20_000);
    const [code] = (await once(client, 'close')) as [number];
    clearTimeout(guard);
    assert.equal(code, 1000, 'the close frame is read where it was written');
    const want = texts.map(String);
    want.splice(7, 0, 'between');
    assert.deepEqual(got, want);
  } finally {
    for (const ws of wss.clients) ws.terminate();
    wss.close();
  }
});
