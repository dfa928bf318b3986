// The bench's SVG plots (bench/lib/svg.ts): well-formed XML, labelled, and points placed
// where their values say.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  type CurvePoint,
  latencyChart,
  linearTicks,
  logTicks,
  type RatioBar,
  ratioChart,
} from '../bench/lib/svg.js';

/**
 * A small XML well-formedness check: every tag matches, attributes are quoted, `&` starts an
 * entity, one root element. Enough for the SVG we write (no CDATA, no doctype).
 */
function assertWellFormed(xml: string): void {
  const tag = /<(\/?)([A-Za-z][\w:.-]*)((?:\s+[\w:.-]+="[^"<]*")*)\s*(\/?)>/y;
  const stack: string[] = [];
  let roots = 0;
  let i = 0;
  while (i < xml.length) {
    const lt = xml.indexOf('<', i);
    const textPart = xml.slice(i, lt < 0 ? xml.length : lt);
    assert.doesNotMatch(textPart, /&(?!(?:amp|lt|gt|quot|apos|#\d+);)/, `bare & in text near ${i}`);
    if (lt < 0) break;
    tag.lastIndex = lt;
    const m = tag.exec(xml);
    assert.ok(m, `malformed tag at ${lt}: ${xml.slice(lt, lt + 60)}`);
    const [whole, closing, name, attrs, selfClosing] = m as unknown as [
      string,
      string,
      string,
      string,
      string,
    ];
    assert.doesNotMatch(attrs, /&(?!(?:amp|lt|gt|quot|apos|#\d+);)/, `bare & in attributes of <${name}>`);
    if (closing) {
      assert.equal(stack.pop(), name, `</${name}> closes the wrong element`);
    } else {
      if (stack.length === 0) roots++;
      if (!selfClosing) stack.push(name);
    }
    i = lt + whole.length;
  }
  assert.deepEqual(stack, [], 'unclosed elements');
  assert.equal(roots, 1, 'one root element');
}

/** [cx, cy] of the points of one latency series, by the series name their hover text starts with. */
function seriesPoints(svg: string, series: string): [number, number][] {
  const re = new RegExp(`<circle cx="([\\d.]+)" cy="([\\d.]+)"[^>]*><title>${series} `, 'g');
  return [...svg.matchAll(re)].map((m) => [Number(m[1]), Number(m[2])]);
}

const CURVE: CurvePoint[] = [
  { offered: 5_000, achieved: 4_600, p50: 4, p99: 20, p999: 40 },
  { offered: 1_000, achieved: 1_000, p50: 2, p99: 9, p999: 14 },
  { offered: 10_000, achieved: 7_000, p50: 300, p99: 900, p999: 1_200 },
];

test('the well-formedness check itself rejects broken XML', () => {
  assert.throws(() => assertWellFormed('<svg><g></svg>'));
  assert.throws(() => assertWellFormed('<svg><text>a & b</text></svg>'));
  assert.throws(() => assertWellFormed('<svg x=1/>'));
  assert.throws(() => assertWellFormed('<svg/><svg/>'));
  assertWellFormed('<svg a="1"><text>a &amp; b</text><g/></svg>\n');
});

test('the latency chart is well-formed SVG with its title, axes, legend and target lines', () => {
  const svg = latencyChart(CURVE, { title: 'Latency <p50 & p99>' });
  assertWellFormed(svg);
  assert.match(svg, /^<svg xmlns="http:\/\/www.w3.org\/2000\/svg"/);
  assert.match(svg, /<title>Latency &lt;p50 &amp; p99&gt;<\/title>/);
  for (const label of [
    'offered rate (events/s)',
    'latency (ms, log scale)',
    'p99.9',
    'p50 target 3 ms',
    'p99 target 15 ms',
  ]) {
    assert.ok(svg.includes(`>${label}<`), `label ${label}`);
  }
  assert.ok(svg.includes('>10,000<'), 'x tick at 10,000 events/s');
});

test('latency points go right with the offered rate and up with the latency, on a log scale', () => {
  const svg = latencyChart(CURVE);
  const p50 = seriesPoints(svg, 'p50');
  const p99 = seriesPoints(svg, 'p99');
  assert.equal(p50.length, 3);
  const xs = p50.map(([x]) => x);
  assert.deepEqual(
    xs,
    [...xs].sort((a, b) => a - b),
    'sorted by offered rate',
  );
  const ys = p50.map(([, y]) => y);
  assert.ok(
    (ys[0] as number) > (ys[1] as number) && (ys[1] as number) > (ys[2] as number),
    'higher latency, higher up',
  );
  // Log scale: 2 → 4 ms (×2) spans the same height as 4.5 → 9 ms would; 4 → 300 ms (×75) much more.
  const [y1, y2, y3] = ys as [number, number, number];
  assert.ok(y2 - y3 > 5 * (y1 - y2));
  for (const [i, [x, y]] of p99.entries()) {
    assert.equal(x, xs[i], 'p99 at the same offered rate as p50');
    assert.ok(y < (ys[i] as number), 'p99 above p50');
  }
});

test('a saturated point (achieved < 90% of offered) is hollow', () => {
  const svg = latencyChart(CURVE);
  const fills = [...svg.matchAll(/<circle [^>]*fill="([^"]+)"[^>]*><title>p50 /g)].map((m) => m[1]);
  assert.deepEqual(fills.slice(0, 2), ['#1565c0', '#1565c0']);
  assert.equal(fills[2], '#fff');
});

test('an empty or partly missing curve still renders', () => {
  const empty = latencyChart([]);
  assertWellFormed(empty);
  assert.ok(empty.includes('no latency curve in this run'));
  const holes = latencyChart([{ offered: 1_000, achieved: Number.NaN, p50: Number.NaN, p99: 5, p999: 8 }]);
  assertWellFormed(holes);
  assert.equal(seriesPoints(holes, 'p50').length, 0);
  assert.equal(seriesPoints(holes, 'p99').length, 1);
  assert.doesNotMatch(holes, /NaN/);
});

test("the floor's p50 and p99 are drawn beside the broker's, at their own offered rates, inside the scale", () => {
  const floor: CurvePoint[] = [
    { offered: 1_000, achieved: 1_000, p50: 1, p99: 4, p999: 6 },
    { offered: 20_000, achieved: 15_000, p50: 5_000, p99: 9_000, p999: 9_500 },
  ];
  const svg = latencyChart(CURVE, {}, undefined, floor);
  assertWellFormed(svg);
  const p50 = seriesPoints(svg, 'p50');
  const floorP50 = seriesPoints(svg, 'floor p50');
  const floorP99 = seriesPoints(svg, 'floor p99');
  assert.equal(floorP50.length, 2);
  assert.equal(floorP99.length, 2);
  assert.ok(!svg.includes('floor p99.9'), 'no p99.9 for the floor');
  assert.ok(svg.includes('>floor p50<') && svg.includes('>floor p99<'), 'in the legend');
  // 1,000 events/s: the same x as the broker's point there, and the floor's 1 ms below the broker's 2 ms.
  const broker1000 = p50.find(([xx]) => floorP50.some(([fx]) => fx === xx));
  assert.ok(broker1000, 'a shared offered rate has the same x');
  assert.ok((floorP50[0] as [number, number])[1] > broker1000[1], 'the lower latency is lower on the plot');
  // The x axis reaches the floor's 20,000 though the broker's curve ends at 10,000; y reaches 9 s.
  const [fx20k] = floorP50[1] as [number, number];
  assert.ok(fx20k > Math.max(...p50.map(([xx]) => xx)));
  assert.ok(svg.includes('>20,000<') || svg.includes('>20000<'));
  assert.ok(svg.includes('>10 s<'), "a log tick above the floor's 9 s");
  const none = latencyChart(CURVE);
  assert.ok(!none.includes('floor p50'), 'no floor, no floor lines nor legend');
});

const BARS: RatioBar[] = [
  {
    scenario: 'A',
    metric: 'e2e vs B-pg',
    ratio: 0.4,
    threshold: 0.5,
    better: 'higher',
    meets: false,
    detail: '4 vs 10',
  },
  {
    scenario: 'Ingest',
    metric: 'acked events/s vs B-js',
    ratio: 3.2,
    threshold: 3,
    better: 'higher',
    meets: true,
    detail: '32 vs 10',
  },
  {
    scenario: 'Latency at 5,000 events/s, ACCEPTED, 100 threads, one per request',
    metric: 'p99 <15 ms>',
    ratio: 0.8,
    threshold: 1,
    better: 'lower',
    meets: true,
    detail: '12 ms',
  },
  {
    scenario: 'Latency',
    metric: 'p50',
    ratio: 500,
    threshold: 1,
    better: 'lower',
    meets: false,
    detail: '1,500 ms',
  },
];

function barRects(svg: string): { x: number; width: number; fill: string }[] {
  return [
    ...svg.matchAll(/<rect x="([\d.]+)" y="[\d.]+" width="([\d.]+)" height="\d+" fill="([^"]+)"><title>/g),
  ].map((m) => ({ x: Number(m[1]), width: Number(m[2]), fill: m[3] as string }));
}

test('the ratio chart is well-formed, labelled, and colours each bar by its target', () => {
  const svg = ratioChart(BARS, { title: 'Scenarios vs baselines', subtitle: 'full run <today>' });
  assertWellFormed(svg);
  for (const label of [
    '>Scenarios vs baselines<',
    '>full run &lt;today&gt;<',
    '>e2e vs B-pg<',
    '>p99 &lt;15 ms&gt;<',
    '>Latency at 5,000 events/s, ACCEPTED, …<',
    'meets target',
    'misses target',
  ]) {
    assert.ok(svg.includes(label), `label ${label}`);
  }
  assert.ok(svg.includes('0.40× (≥ 0.50×)'));
  assert.ok(svg.includes('500× (≤ 1.0×)'));
  const rects = barRects(svg);
  assert.deepEqual(
    rects.map((r) => r.fill),
    ['#c62828', '#2e7d32', '#2e7d32', '#c62828'],
  );
});

test('bar lengths are proportional to the ratio; one beyond the scale is cut and marked', () => {
  const widths = barRects(ratioChart(BARS)).map((r) => r.width);
  assert.equal(widths.length, 4);
  const [a, b, c, d] = widths as [number, number, number, number];
  assert.ok(Math.abs(c / a - 2) < 0.01, `0.8 is twice 0.4: ${c} / ${a}`);
  assert.ok(b > c);
  assert.ok(d >= b, 'the 500× bar reaches the edge');
  assert.match(ratioChart(BARS), /<path d="M[\d.]+,[\d.]+ l9,/);
  assert.doesNotMatch(ratioChart(BARS.slice(0, 3)), /<path d="M[\d.]+,[\d.]+ l9,/);
});

test('the ratio chart renders with no bars', () => {
  const svg = ratioChart([]);
  assertWellFormed(svg);
  assert.ok(svg.includes('no ratios in this run'));
});

test('axis ticks are round numbers covering the range', () => {
  assert.deepEqual(linearTicks(4_700), [0, 1_000, 2_000, 3_000, 4_000, 5_000]);
  assert.deepEqual(linearTicks(1.3), [0, 0.5, 1, 1.5]);
  assert.deepEqual(logTicks(1.5, 40), [1, 2, 5, 10, 20, 50, 100]);
  assert.deepEqual(logTicks(0.5, 20_000), [0.1, 1, 10, 100, 1_000, 10_000, 100_000]);
});
