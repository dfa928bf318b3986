/**
 * The benchmark's two plots as standalone SVG text, without dependencies, so `make bench`
 * can write them next to docs/benchmarks.md where GitHub's Markdown and a browser show them:
 *  - latencyChart: latency percentiles (p50/p99/p99.9, log scale) against the offered rate,
 *    with the target lines drawn;
 *  - ratioChart: each scenario's result as a ratio to its baseline, one horizontal bar each,
 *    with its target marked, green when met and red when not.
 * Pure functions of their input; missing values (NaN, null from JSON) are left out of a plot.
 */
import { fmt } from './report.js';

/** One offered rate of the latency curve; latencies in ms. */
export interface CurvePoint {
  /** Events/s offered. */
  readonly offered: number;
  /** Events/s actually delivered (below `offered` past saturation). */
  readonly achieved: number;
  readonly p50: number;
  readonly p99: number;
  readonly p999: number;
}

/** A horizontal line across the latency chart, e.g. a target. */
export interface TargetLine {
  readonly label: string;
  readonly ms: number;
  readonly color: string;
}

/** One bar of the ratio chart. */
export interface RatioBar {
  readonly scenario: string;
  readonly metric: string;
  /** The scenario's value divided by its baseline (or by its target, for an absolute target). */
  readonly ratio: number;
  /** Where the target lies on the same scale. */
  readonly threshold: number;
  /** 'higher': the target is ratio ≥ threshold; 'lower': ratio ≤ threshold. */
  readonly better: 'higher' | 'lower';
  readonly meets: boolean;
  /** Hover text: the raw numbers behind the ratio. */
  readonly detail: string;
}

const FONT = 'font-family="-apple-system, Segoe UI, Helvetica, Arial, sans-serif" font-size="12"';
const AXIS = '#333';
const GRID = '#ddd';
const GREEN = '#2e7d32';
const RED = '#c62828';
/**
 * A point is drawn hollow when the broker delivered less than this share of the offered rate
 * (the saturation rule of bench/scenarios/fixed-rate.ts, SATURATED_BELOW).
 */
const SATURATED_SHARE = 0.9;

const SERIES = [
  { key: 'p50', label: 'p50', color: '#1565c0', dash: '' },
  { key: 'p99', label: 'p99', color: '#ef6c00', dash: '' },
  { key: 'p999', label: 'p99.9', color: '#6a1b9a', dash: '6 3' },
] as const;
/** The floor's curve (B-path, the bare parts): its p50 and p99, thin and dotted, no markers but small ones. */
const FLOOR_SERIES = [
  { key: 'p50', label: 'floor p50', color: '#1565c0', dash: '1 3' },
  { key: 'p99', label: 'floor p99', color: '#ef6c00', dash: '1 3' },
] as const;

export const LATENCY_TARGETS: readonly TargetLine[] = [
  { label: 'p50 target 3 ms', ms: 3, color: '#1565c0' },
  { label: 'p99 target 15 ms', ms: 15, color: '#ef6c00' },
];

export function escapeXml(text: string): string {
  return text
    .replaceAll('&', '&amp;')
    .replaceAll('<', '&lt;')
    .replaceAll('>', '&gt;')
    .replaceAll('"', '&quot;')
    .replaceAll("'", '&apos;');
}

function isNumber(v: unknown): v is number {
  return typeof v === 'number' && Number.isFinite(v);
}

/** Coordinates rounded to 0.1 px keep the files small and stable. */
function px(v: number): string {
  return String(Math.round(v * 10) / 10);
}

function text(x: number, y: number, body: string, attrs = ''): string {
  return `<text x="${px(x)}" y="${px(y)}"${attrs ? ` ${attrs}` : ''}>${escapeXml(body)}</text>`;
}

function line(x1: number, y1: number, x2: number, y2: number, attrs: string): string {
  return `<line x1="${px(x1)}" y1="${px(y1)}" x2="${px(x2)}" y2="${px(y2)}" ${attrs}/>`;
}

/** Title and subtitle of a chart (the subtitle says which run it shows). */
export interface ChartText {
  readonly title?: string;
  readonly subtitle?: string;
}

/** Room above the plot for the title and the subtitle. */
const HEADER = 56;

function svgDocument(width: number, height: number, { title, subtitle }: ChartText, body: string[]): string {
  const heading = title ?? '';
  return [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" role="img" ${FONT}>`,
    `<title>${escapeXml(subtitle ? `${heading} (${subtitle})` : heading)}</title>`,
    // An opaque background keeps the black text readable in GitHub's dark theme.
    `<rect width="${width}" height="${height}" fill="#fff"/>`,
    text(width / 2, 22, heading, 'text-anchor="middle" font-size="15" font-weight="bold"'),
    ...(subtitle ? [text(width / 2, 40, subtitle, 'text-anchor="middle" fill="#555"')] : []),
    ...body,
    '</svg>',
    '',
  ].join('\n');
}

/** Round numbers (1, 2, 2.5, 5 × 10^k) from 0 to at least `max`, about `about` of them. */
export function linearTicks(max: number, about = 5): number[] {
  if (!(max > 0)) return [0, 1];
  const raw = max / about;
  const decade = 10 ** Math.floor(Math.log10(raw));
  const step = ([1, 2, 2.5, 5, 10].find((m) => m * decade >= raw) ?? 10) * decade;
  const count = Math.ceil(max / step - 1e-9);
  return Array.from({ length: count + 1 }, (_, i) => Math.round(i * step * 1e9) / 1e9);
}

/** Ticks of a log axis covering [min, max]: 1-2-5 per decade over up to 3 decades, else decades. */
export function logTicks(min: number, max: number): number[] {
  const lo = Math.floor(Math.log10(min));
  const hi = Math.ceil(Math.log10(max));
  const steps = hi - lo <= 3 ? [1, 2, 5] : [1];
  const ticks: number[] = [];
  for (let e = lo; e <= hi; e++) {
    for (const m of steps) {
      const t = Number((m * 10 ** e).toPrecision(3));
      if (t >= 10 ** lo && t <= 10 ** hi) ticks.push(t);
    }
  }
  return ticks;
}

function msLabel(ms: number): string {
  return ms >= 1_000 ? `${fmt(ms / 1_000, ms % 1_000 === 0 ? 0 : 1)} s` : `${fmt(ms, ms < 1 ? 1 : 0)} ms`;
}

/**
 * Latency percentiles (log y, ms) against the offered rate (linear x, events/s), one line
 * per percentile, the `targets` as dashed horizontal lines. A point where the broker fell
 * behind (achieved < 90% of offered) is drawn hollow. With a `floor` curve (the bare parts
 * under the same load), its p50 and p99 are drawn thin and dotted beside the broker's.
 */
export function latencyChart(
  curve: readonly CurvePoint[],
  { title = 'Send → WebSocket latency vs offered rate', subtitle }: ChartText = {},
  targets: readonly TargetLine[] = LATENCY_TARGETS,
  floor: readonly CurvePoint[] = [],
): string {
  const width = 760;
  const height = 420;
  const left = 70;
  const right = 160;
  const top = HEADER;
  const bottom = 56;
  const plotW = width - left - right;
  const plotH = height - top - bottom;

  const points = [...curve].filter((p) => isNumber(p.offered)).sort((a, b) => a.offered - b.offered);
  const floorPoints = [...floor].filter((p) => isNumber(p.offered)).sort((a, b) => a.offered - b.offered);
  const latencies = [
    ...points.flatMap((p) => SERIES.map((s) => p[s.key])),
    ...floorPoints.flatMap((p) => FLOOR_SERIES.map((s) => p[s.key])),
  ].filter((v) => isNumber(v) && v > 0);
  const yValues = [...latencies, ...targets.map((t) => t.ms)];
  const yMin = Math.min(...yValues, 1);
  const yMax = Math.max(...yValues, 10);
  const yTicks = logTicks(yMin, yMax);
  const logLo = Math.log10(yTicks[0] as number);
  const logHi = Math.log10(yTicks.at(-1) as number);
  const y = (ms: number) => top + plotH - ((Math.log10(ms) - logLo) / (logHi - logLo)) * plotH;

  const xTicks = linearTicks(
    Math.max(...points.map((p) => p.offered), ...floorPoints.map((p) => p.offered), 1),
  );
  const xMax = xTicks.at(-1) as number;
  const x = (rate: number) => left + (rate / xMax) * plotW;

  const body: string[] = [];
  for (const t of yTicks) {
    body.push(line(left, y(t), left + plotW, y(t), `stroke="${GRID}"`));
    body.push(text(left - 6, y(t) + 4, msLabel(t), 'text-anchor="end"'));
  }
  for (const t of xTicks) {
    body.push(line(x(t), top, x(t), top + plotH, `stroke="${GRID}"`));
    body.push(text(x(t), top + plotH + 18, fmt(t, 0), 'text-anchor="middle"'));
  }
  body.push(line(left, top + plotH, left + plotW, top + plotH, `stroke="${AXIS}"`));
  body.push(line(left, top, left, top + plotH, `stroke="${AXIS}"`));
  body.push(text(left + plotW / 2, height - 14, 'offered rate (events/s)', 'text-anchor="middle"'));
  body.push(
    text(
      16,
      top + plotH / 2,
      'latency (ms, log scale)',
      `text-anchor="middle" transform="rotate(-90 16 ${px(top + plotH / 2)})"`,
    ),
  );

  for (const t of targets) {
    body.push(
      line(
        left,
        y(t.ms),
        left + plotW,
        y(t.ms),
        `stroke="${t.color}" stroke-dasharray="2 4" stroke-width="1.5"`,
      ),
    );
    body.push(text(left + plotW - 4, y(t.ms) - 4, t.label, `text-anchor="end" fill="${t.color}"`));
  }

  if (points.length === 0) {
    body.push(
      text(
        left + plotW / 2,
        top + plotH / 2,
        'no latency curve in this run',
        'text-anchor="middle" fill="#777"',
      ),
    );
  }
  for (const s of SERIES) {
    const drawn = points.filter((p) => isNumber(p[s.key]) && p[s.key] > 0);
    const stroke = `stroke="${s.color}" stroke-width="2"${s.dash ? ` stroke-dasharray="${s.dash}"` : ''}`;
    if (drawn.length > 1) {
      const d = drawn.map((p, i) => `${i === 0 ? 'M' : 'L'}${px(x(p.offered))},${px(y(p[s.key]))}`).join(' ');
      body.push(`<path d="${d}" fill="none" ${stroke}/>`);
    }
    for (const p of drawn) {
      const behind = isNumber(p.achieved) && p.achieved < SATURATED_SHARE * p.offered;
      const tip =
        `${s.label} ${msLabel(p[s.key])} at ${fmt(p.offered, 0)} events/s offered` +
        (isNumber(p.achieved) ? `, ${fmt(p.achieved, 0)} achieved` : '');
      body.push(
        `<circle cx="${px(x(p.offered))}" cy="${px(y(p[s.key]))}" r="4" fill="${behind ? '#fff' : s.color}" ` +
          `stroke="${s.color}" stroke-width="2"><title>${escapeXml(tip)}</title></circle>`,
      );
    }
  }

  const floorShown = FLOOR_SERIES.filter((s) => floorPoints.some((p) => isNumber(p[s.key]) && p[s.key] > 0));
  for (const s of floorShown) {
    const drawn = floorPoints.filter((p) => isNumber(p[s.key]) && p[s.key] > 0);
    const stroke = `stroke="${s.color}" stroke-width="1.5" stroke-dasharray="${s.dash}"`;
    if (drawn.length > 1) {
      const d = drawn.map((p, i) => `${i === 0 ? 'M' : 'L'}${px(x(p.offered))},${px(y(p[s.key]))}`).join(' ');
      body.push(`<path d="${d}" fill="none" ${stroke}/>`);
    }
    for (const p of drawn) {
      const tip = `${s.label} ${msLabel(p[s.key])} at ${fmt(p.offered, 0)} events/s offered`;
      body.push(
        `<circle cx="${px(x(p.offered))}" cy="${px(y(p[s.key]))}" r="2" fill="${s.color}">` +
          `<title>${escapeXml(tip)}</title></circle>`,
      );
    }
  }

  const legendX = left + plotW + 16;
  const legend = [
    ...SERIES.map((s) => ({ ...s, width: 2, marker: 3.5 })),
    ...floorShown.map((s) => ({ ...s, width: 1.5, marker: 2 })),
  ];
  legend.forEach((s, i) => {
    const ly = top + 12 + i * 20;
    const dash = s.dash ? ` stroke-dasharray="${s.dash}"` : '';
    body.push(line(legendX, ly, legendX + 24, ly, `stroke="${s.color}" stroke-width="${s.width}"${dash}`));
    body.push(`<circle cx="${px(legendX + 12)}" cy="${px(ly)}" r="${s.marker}" fill="${s.color}"/>`);
    body.push(text(legendX + 30, ly + 4, s.label));
  });
  const noteY = top + 12 + legend.length * 20 + 10;
  body.push(
    `<circle cx="${px(legendX + 12)}" cy="${px(noteY)}" r="4" fill="#fff" stroke="#555" stroke-width="2"/>`,
  );
  body.push(text(legendX + 30, noteY + 4, 'achieved < 90%'));
  body.push(text(legendX + 30, noteY + 19, 'of offered'));
  body.push(
    line(
      legendX,
      noteY + 38,
      legendX + 24,
      noteY + 38,
      `stroke="#555" stroke-dasharray="2 4" stroke-width="1.5"`,
    ),
  );
  body.push(text(legendX + 30, noteY + 42, 'target'));

  return svgDocument(width, height, { title, ...(subtitle ? { subtitle } : {}) }, body);
}

/** About as many characters as fit in the ratio chart's label column. */
const LABEL_CHARS = 38;

function clip(label: string): string {
  return label.length > LABEL_CHARS ? `${label.slice(0, LABEL_CHARS - 1)}…` : label;
}

function ratioText(r: number): string {
  return `${fmt(r, r >= 10 ? 0 : r >= 1 ? 1 : 2)}×`;
}

/**
 * One horizontal bar per scenario: its ratio to its baseline on a linear scale, the target
 * as a black tick, green when met, red when not. Bars beyond the scale (a latency 100× its
 * target) are cut at the edge and marked with an arrow; their label gives the true ratio.
 */
export function ratioChart(
  bars: readonly RatioBar[],
  { title = 'Each scenario vs its baseline', subtitle }: ChartText = {},
): string {
  const width = 760;
  const rowH = 38;
  const labelW = 280;
  const valueW = 130;
  const top = HEADER;
  const bottom = 76;
  const left = labelW + 10;
  const plotW = width - left - valueW;
  const plotH = Math.max(1, bars.length) * rowH;
  const height = top + plotH + bottom;

  const thresholds = bars.map((b) => b.threshold).filter(isNumber);
  const ratios = bars.map((b) => b.ratio).filter(isNumber);
  // Room for twice the largest target: enough to tell 0.1× from 0.5×; beyond it bars are cut.
  const cap = Math.max(...thresholds, 1) * 2;
  const xTicks = linearTicks(Math.min(cap, Math.max(...ratios, ...thresholds, 1) * 1.05));
  const xMax = xTicks.at(-1) as number;
  const x = (r: number) => left + (Math.min(r, xMax) / xMax) * plotW;

  const body: string[] = [];
  for (const t of xTicks) {
    body.push(line(x(t), top, x(t), top + plotH, `stroke="${GRID}"`));
    const decimals = String(xTicks[1]).split('.')[1]?.length ?? 0;
    body.push(text(x(t), top + plotH + 18, `${t === 0 ? '0' : fmt(t, decimals)}×`, 'text-anchor="middle"'));
  }
  body.push(line(left, top, left, top + plotH, `stroke="${AXIS}"`));
  body.push(line(left, top + plotH, left + plotW, top + plotH, `stroke="${AXIS}"`));
  body.push(
    text(
      left + plotW / 2,
      top + plotH + 38,
      'value / baseline (absolute targets: value / target)',
      'text-anchor="middle"',
    ),
  );
  if (bars.length === 0) {
    body.push(
      text(left + plotW / 2, top + rowH / 2 + 4, 'no ratios in this run', 'text-anchor="middle" fill="#777"'),
    );
  }

  bars.forEach((b, i) => {
    const rowY = top + i * rowH;
    const mid = rowY + rowH / 2;
    const color = b.meets ? GREEN : RED;
    body.push(text(left - 8, mid - 3, clip(b.scenario), 'text-anchor="end"'));
    body.push(text(left - 8, mid + 12, clip(b.metric), 'text-anchor="end" font-size="11" fill="#555"'));
    const sign = b.better === 'higher' ? '≥' : '≤';
    const value = isNumber(b.ratio) ? ratioText(b.ratio) : '—';
    const verdict = `${value} (${sign} ${isNumber(b.threshold) ? ratioText(b.threshold) : '?'})`;
    if (isNumber(b.ratio)) {
      body.push(
        `<rect x="${px(left)}" y="${px(rowY + 7)}" width="${px(x(b.ratio) - left)}" height="${rowH - 14}" fill="${color}">` +
          `<title>${escapeXml(`${b.scenario}: ${b.metric}: ${b.detail}`)}</title></rect>`,
      );
      if (b.ratio > xMax) {
        body.push(
          `<path d="M${px(left + plotW)},${px(rowY + 5)} l9,${px(rowH / 2 - 5)} l-9,${px(rowH / 2 - 5)} z" fill="${color}"/>`,
        );
      }
    }
    if (isNumber(b.threshold)) {
      body.push(
        line(x(b.threshold), rowY + 3, x(b.threshold), rowY + rowH - 3, 'stroke="#000" stroke-width="2.5"'),
      );
    }
    body.push(text(left + plotW + 14, mid + 4, verdict, `fill="${color}"`));
  });

  const legendY = height - 16;
  const legend: [string, string][] = [
    [GREEN, 'meets target'],
    [RED, 'misses target'],
  ];
  legend.forEach(([color, label], i) => {
    const lx = left + i * 130;
    body.push(`<rect x="${px(lx)}" y="${px(legendY - 10)}" width="14" height="12" fill="${color}"/>`);
    body.push(text(lx + 20, legendY, label));
  });
  const tx = left + 2 * 130;
  body.push(line(tx + 7, legendY - 12, tx + 7, legendY + 3, 'stroke="#000" stroke-width="2.5"'));
  body.push(text(tx + 20, legendY, 'target'));

  return svgDocument(width, height, { title, ...(subtitle ? { subtitle } : {}) }, body);
}
