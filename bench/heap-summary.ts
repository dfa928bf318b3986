/**
 * `node dist/bench/heap-summary.js <file.heapprofile> [top]`: what a sampled allocation profile
 * (bench/lib/broker-probe.ts, `RS_BENCH_HEAP_PROFILE_DIR`) says allocated most, by the function
 * that allocated (self) and by package or source directory, in MB and as a share of the whole.
 */
import { readFileSync } from 'node:fs';

interface HeapNode {
  readonly callFrame: { readonly functionName: string; readonly url: string; readonly lineNumber: number };
  readonly selfSize: number;
  readonly children: readonly HeapNode[];
}

function place(url: string): string {
  const pkg = /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(url);
  if (pkg) return pkg[1] as string;
  const own = /dist\/((?:src|bench)\/[^/]+)/.exec(url);
  if (own) return own[1] as string;
  return url.startsWith('node:') ? 'node internals' : url === '' ? '(native)' : url;
}

function main(): void {
  const [file, topArg] = process.argv.slice(2);
  if (!file) throw new Error('usage: heap-summary <file.heapprofile> [top]');
  const head = (JSON.parse(readFileSync(file, 'utf8')) as { head: HeapNode }).head;
  const byFunction = new Map<string, number>();
  const byPlace = new Map<string, number>();
  let total = 0;
  const stack: HeapNode[] = [head];
  while (stack.length > 0) {
    const n = stack.pop() as HeapNode;
    stack.push(...n.children);
    if (n.selfSize === 0) continue;
    total += n.selfSize;
    const cf = n.callFrame;
    const fn = `${cf.functionName || '(anonymous)'} ${cf.url.replace(/^.*\/(dist|node_modules)\//, '$1/')}:${cf.lineNumber + 1}`;
    byFunction.set(fn, (byFunction.get(fn) ?? 0) + n.selfSize);
    byPlace.set(place(cf.url), (byPlace.get(place(cf.url)) ?? 0) + n.selfSize);
  }
  const mb = (b: number) => (b / 1e6).toFixed(1).padStart(8);
  const pct = (b: number) => `${((100 * b) / total).toFixed(1)}%`.padStart(6);
  console.log(`${file}: ${(total / 1e6).toFixed(1)} MB sampled\n\nby place`);
  for (const [k, v] of [...byPlace].sort((a, b) => b[1] - a[1]).slice(0, 15))
    console.log(`${mb(v)} MB ${pct(v)}  ${k}`);
  console.log('\nby function (self)');
  for (const [k, v] of [...byFunction].sort((a, b) => b[1] - a[1]).slice(0, Number(topArg) || 30)) {
    console.log(`${mb(v)} MB ${pct(v)}  ${k}`);
  }
}

main();
