// The layers of src/ (docs/architecture.md): a module imports only from its own layer's
// directory or from layers below it, so the shared vocabulary (domain/) sits under every
// stage and nothing reaches back up. Reads the TypeScript sources.
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';

const SRC = fileURLToPath(new URL('../../src', import.meta.url));

/** Bottom first. A module is in the first entry its path (relative to src/) starts with. */
const LAYERS: readonly (readonly string[])[] = [
  ['gen/'],
  ['errors.ts', 'logger.ts', 'proto.ts', 'metrics.ts'],
  ['domain/'],
  ['tracing.ts'],
  ['auth/', 'grpc/'],
  ['http/'],
  ['log/'],
  ['persist/'],
  ['ingest/', 'history/'],
  ['fanout/core/'],
  ['fanout/'],
  ['config.ts'],
  ['roles/'],
  ['broker.ts'],
  ['workers/'],
  ['client/'],
  ['main.ts'],
  ['cli/'],
];

/** The layer index and the directory (the unit imports may cross within a layer: never). */
function placeOf(file: string): { layer: number; unit: string } {
  for (const [i, layer] of LAYERS.entries()) {
    for (const prefix of layer) if (file.startsWith(prefix)) return { layer: i, unit: prefix };
  }
  throw new Error(`${file} is in no layer: add it to LAYERS (and docs/architecture.md)`);
}

function sources(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((d) => {
    const path = join(dir, d.name);
    if (d.isDirectory()) return sources(path);
    return d.name.endsWith('.ts') ? [relative(SRC, path)] : [];
  });
}

/** Relative imports (static, `import type` too, and `import('…')` types), as paths relative to src/. */
function importsOf(file: string): string[] {
  const text = readFileSync(join(SRC, file), 'utf8');
  const specs = [...text.matchAll(/(?:from|import\()\s*'(\.[^']+)'/g)].map((m) => m[1] as string);
  return specs.map((s) => relative(SRC, join(SRC, file, '..', s)).replace(/\.js$/, '.ts'));
}

test('every import in src/ goes to the same directory or a lower layer', () => {
  const files = sources(SRC);
  assert.ok(files.length > 50, `read ${files.length} files`);
  const wrong: string[] = [];
  for (const file of files) {
    const from = placeOf(file);
    for (const target of importsOf(file)) {
      const to = placeOf(target);
      const sameUnit = to.unit === from.unit;
      if (!sameUnit && to.layer >= from.layer)
        wrong.push(`${file} (layer ${from.layer}) imports ${target} (layer ${to.layer})`);
    }
  }
  assert.deepEqual(wrong, []);
});

test('the layer check itself finds an import that goes up', () => {
  assert.ok(placeOf('persist/queries.ts').layer < placeOf('fanout/core/chat-view.ts').layer);
  assert.ok(placeOf('domain/ids.ts').layer < placeOf('auth/scope.ts').layer);
  assert.deepEqual(importsOf('fanout/core/chat-view.ts').includes('persist/queries.ts'), true);
  assert.throws(() => placeOf('elsewhere/x.ts'), /in no layer/);
});
