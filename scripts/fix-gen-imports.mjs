// proto-loader-gen-types writes extensionless relative imports; NodeNext resolution needs `.js`.
import { readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

function walk(dir) {
  for (const name of readdirSync(dir)) {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) walk(path);
    else if (path.endsWith('.ts')) {
      const text = readFileSync(path, 'utf8').replace(/(from '\.{1,2}\/[^']+?)(?<!\.js)'/g, "$1.js'");
      writeFileSync(path, text);
    }
  }
}
walk('src/gen');
