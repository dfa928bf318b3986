// Copies the wire contract (the repository's proto/, its source of truth) into the package, so
// the published package carries the .proto files its gRPC publisher loads at run time.
import { cpSync, mkdirSync, rmSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const from = fileURLToPath(new URL('../../../proto/runstream/', import.meta.url));
const to = fileURLToPath(new URL('../proto/runstream/', import.meta.url));
rmSync(to, { recursive: true, force: true });
mkdirSync(to, { recursive: true });
cpSync(from, to, { recursive: true });
