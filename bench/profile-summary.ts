/**
 * Summarises a broker CPU profile written by `node dist/bench/run.js --profile`:
 * `node dist/bench/profile-summary.js <file.cpuprofile> [top]`.
 *
 * Each sample goes to the component of its nearest library or runstream frame (leaf to
 * root), with socket write syscalls shown apart; then the top functions by self time.
 * Percentages are of the busy (non-idle) samples.
 */
import { readFileSync } from 'node:fs';

interface ProfileNode {
  readonly id: number;
  readonly callFrame: { readonly functionName: string; readonly url: string; readonly lineNumber: number };
  readonly children?: readonly number[];
}

interface Profile {
  readonly nodes: readonly ProfileNode[];
  readonly samples: readonly number[];
  readonly timeDeltas: readonly number[];
}

/** First match wins; tested against each frame's URL from the sampled leaf up to the root. */
const COMPONENTS: readonly (readonly [RegExp, string])[] = [
  [/node_modules\/(pg|pg-protocol|pg-pool|pg-types)\//, 'pg client'],
  [/node_modules\/ws\//, 'ws (fan-out sockets)'],
  [/node_modules\/(@grpc|protobufjs|@protobufjs|grpc-health-check)\//, 'gRPC + protobuf'],
  [/node_modules\/@nats-io\//, 'NATS client'],
  [/node_modules\/(pino|sonic-boom)\//, 'logging'],
  [/dist\/src\/ingest\//, 'src/ingest'],
  [/dist\/src\/persist\//, 'src/persist'],
  [/dist\/src\/fanout\//, 'src/fanout'],
  [/dist\/src\/log\//, 'src/log'],
  [/dist\/src\//, 'src (other)'],
];
const WRITE_SYSCALLS = new Set(['writev', 'writeBuffer']);
const SPECIAL: Readonly<Record<string, string>> = {
  '(idle)': 'idle',
  '(garbage collector)': 'GC',
  '(program)': '(program)',
};

function main(): void {
  const [file, topArg] = process.argv.slice(2);
  if (!file) {
    process.stderr.write('usage: node dist/bench/profile-summary.js <file.cpuprofile> [top]\n');
    process.exit(2);
  }
  const top = Number(topArg ?? 25);
  const p = JSON.parse(readFileSync(file, 'utf8')) as Profile;
  const byId = new Map(p.nodes.map((n) => [n.id, n]));
  const parent = new Map<number, number>();
  for (const n of p.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
  const selfUs = new Map<number, number>();
  p.samples.forEach((id, i) => {
    selfUs.set(id, (selfUs.get(id) ?? 0) + (p.timeDeltas[i] ?? 0));
  });

  const components = new Map<string, number>();
  const functions = new Map<string, number>();
  let total = 0;
  for (const [id, us] of selfUs) {
    total += us;
    const frame = (byId.get(id) as ProfileNode).callFrame;
    let component = SPECIAL[frame.functionName];
    for (let q: number | undefined = id; component === undefined && q !== undefined; q = parent.get(q)) {
      const url = byId.get(q)?.callFrame.url ?? '';
      component = COMPONENTS.find(([re]) => re.test(url))?.[1];
    }
    component ??= 'node internals, other';
    if (WRITE_SYSCALLS.has(frame.functionName)) component += ' [write syscalls]';
    components.set(component, (components.get(component) ?? 0) + us);
    const where = frame.url.replace(/^.*\/(node_modules|dist)\//, '$1/') || '(native)';
    const fn = `${frame.functionName || '(anonymous)'} ${where}:${frame.lineNumber + 1}`;
    functions.set(fn, (functions.get(fn) ?? 0) + us);
  }
  const busy = total - (components.get('idle') ?? 0);
  const line = (name: string, us: number) =>
    `${(us / 1000).toFixed(0).padStart(7)} ms ${name === 'idle' ? '      ' : `${((100 * us) / busy).toFixed(1).padStart(5)}%`}  ${name}`;
  const sorted = (m: Map<string, number>) => [...m].sort((a, b) => b[1] - a[1]);

  process.stdout.write(
    `${file}: ${(total / 1000).toFixed(0)} ms sampled, ${(busy / 1000).toFixed(0)} ms busy\n`,
  );
  process.stdout.write('\nby component (self time; % of busy)\n');
  for (const [name, us] of sorted(components)) process.stdout.write(`${line(name, us)}\n`);
  process.stdout.write(`\ntop ${top} functions (self time)\n`);
  const busyFunctions = sorted(functions).filter(([name]) => !name.startsWith('(idle)'));
  for (const [name, us] of busyFunctions.slice(0, top)) process.stdout.write(`${line(name, us)}\n`);
}

main();
