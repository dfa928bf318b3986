// deploy/ is not run here (no Docker daemon, no Kubernetes), so what can be checked is:
// every YAML file parses; runstream's containers set only variables src/config.ts reads;
// every image is pinned (a tag, never `latest`; NATS at a 2.12+ patch release); the
// cluster compose file has the topology it says (3 NATS nodes routed to each other, R3, 2
// ingest+fan-out nodes, 2 persisters, /readyz health checks, a balancer over the nodes);
// the Kubernetes budgets select the pods of their Deployments; the NATS config is valid.
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { parseAllDocuments } from 'yaml';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const DEPLOY = join(ROOT, 'deploy');

function files(dir: string, pattern: RegExp): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((d) => {
    const path = join(dir, d.name);
    if (d.isDirectory()) return files(path, pattern);
    return pattern.test(d.name) ? [path] : [];
  });
}

type Doc = Record<string, unknown>;

/** Every document of a YAML file, with merge keys (`<<: *anchor`) applied. */
function load(path: string): Doc[] {
  const docs = parseAllDocuments(readFileSync(path, 'utf8'), { merge: true });
  const list = Array.isArray(docs) ? docs : [docs];
  return list.map((d) => {
    assert.deepEqual(
      d.errors.map((e) => e.message),
      [],
      relative(ROOT, path),
    );
    return d.toJS({ maxAliasCount: 1000 }) as Doc;
  });
}

/** The variable names src/config.ts reads (the only module that reads the environment). */
function configNames(): Set<string> {
  const text = readFileSync(join(ROOT, 'src', 'config.ts'), 'utf8');
  return new Set(
    [...text.matchAll(/'((?:RS|GRPC|HTTP|NATS|DATABASE|LOG)_[A-Z0-9_]+)'/g)].map((m) => m[1] as string),
  );
}

interface ComposeService {
  image?: string;
  build?: unknown;
  environment?: Record<string, string> | string[];
  healthcheck?: { test?: string[] | string };
  command?: string[];
  volumes?: string[];
}

function compose(name: string): Record<string, ComposeService> {
  const [doc] = load(join(DEPLOY, name));
  return (doc as { services: Record<string, ComposeService> }).services;
}

function envOf(s: ComposeService): Record<string, string> {
  if (Array.isArray(s.environment)) {
    return Object.fromEntries(
      s.environment.map((kv) => [kv.split('=')[0], kv.split('=').slice(1).join('=')]),
    );
  }
  return Object.fromEntries(Object.entries(s.environment ?? {}).map(([k, v]) => [k, String(v)]));
}

const isRunstream = (s: ComposeService): boolean =>
  s.build !== undefined || s.image?.startsWith('runstream') === true;

/** An image reference's tag is pinned: present, not `latest`; NATS at a patch release of 2.12 or later. */
function checkPinned(image: string, where: string): void {
  const m = /^([^:@]+)(?::([^@]+))?(@sha256:[0-9a-f]{64})?$/.exec(image);
  assert.ok(m, `${where}: image ${image}`);
  const [, repo, tag, digest] = m;
  assert.ok(tag !== undefined || digest !== undefined, `${where}: ${image} has no tag`);
  assert.notEqual(tag, 'latest', `${where}: ${image}`);
  if (repo === 'nats') natsTagOk(tag ?? '', where);
}

function natsTagOk(tag: string, where: string): void {
  const v = /^(\d+)\.(\d+)\.(\d+)(-[a-z0-9.]+)?$/.exec(tag);
  assert.ok(v, `${where}: nats:${tag} is not pinned to a patch release`);
  const [major, minor] = [Number(v[1]), Number(v[2])];
  assert.ok(major > 2 || (major === 2 && minor >= 12), `${where}: nats:${tag} is older than 2.12`);
}

test('every YAML file in deploy/ parses', () => {
  const yamls = files(DEPLOY, /\.ya?ml$/);
  assert.ok(yamls.length >= 10, `found ${yamls.length}`);
  for (const f of yamls) assert.ok(load(f).length >= 1, relative(ROOT, f));
});

test('compose files: runstream sets only variables src/config.ts reads; every image pinned', () => {
  const names = configNames();
  assert.ok(names.has('RS_WORKERS') && names.has('RS_STREAM_REPLICAS') && names.has('DATABASE_URL'));
  for (const file of ['docker-compose.yml', 'compose.cluster.yml']) {
    for (const [name, s] of Object.entries(compose(file))) {
      assert.ok(s.image, `${file} ${name}: no image`);
      checkPinned(s.image, `${file} ${name}`);
      if (!isRunstream(s)) continue;
      for (const key of Object.keys(envOf(s)))
        assert.ok(names.has(key), `${file} ${name}: ${key} is no setting`);
      const check = JSON.stringify(s.healthcheck?.test ?? '');
      assert.match(check, /\/readyz/, `${file} ${name}: health check on /readyz`);
    }
  }
});

test('compose.cluster.yml: 3 routed NATS nodes, the log at R3, 2 ingest+fan-out nodes, 2 persisters, a balancer over the nodes', () => {
  const services = compose('compose.cluster.yml');
  const nats = Object.entries(services).filter(([, s]) => s.image?.startsWith('nats:'));
  assert.equal(nats.length, 3);
  const serverNames = nats.map(([, s]) => envOf(s).NATS_SERVER_NAME);
  assert.equal(new Set(serverNames).size, 3, 'each node has its own server_name');
  const conf = readFileSync(join(DEPLOY, 'nats', 'cluster.conf'), 'utf8');
  for (const [name, s] of nats) {
    assert.ok(
      s.volumes?.some((v) => v.startsWith('./nats/cluster.conf:')),
      `${name} mounts cluster.conf`,
    );
    assert.ok(conf.includes(`nats-route://${name}:6222`), `the routes name ${name}`);
  }
  assert.match(conf, /server_name: \$NATS_SERVER_NAME/);
  assert.match(conf, /^\s*sync_interval: always$/m);

  const brokers = Object.entries(services).filter(([, s]) => isRunstream(s));
  const roles = (r: string) => brokers.filter(([, s]) => envOf(s).RS_ROLES === r).map(([n]) => n);
  assert.equal(roles('ingest,fanout').length, 2);
  assert.equal(roles('persister').length, 2);
  assert.equal(brokers.length, 4);
  const natsUrls = nats.map(([n]) => `nats://${n}:4222`);
  for (const [name, s] of brokers) {
    const env = envOf(s);
    assert.equal(env.RS_STREAM_REPLICAS, '3', name);
    assert.deepEqual(env.NATS_URL?.split(',').sort(), natsUrls.sort(), `${name} knows every NATS node`);
  }
  const haproxy = readFileSync(join(DEPLOY, 'haproxy.cfg'), 'utf8');
  for (const n of roles('ingest,fanout')) {
    assert.ok(haproxy.includes(`${n}:50051`) && haproxy.includes(`${n}:8080`), `the balancer has ${n}`);
  }
  for (const m of haproxy.matchAll(/server \S+ ([a-z0-9-]+):\d+/g)) assert.ok(services[m[1] as string], m[0]);
});

interface K8sObject {
  kind: string;
  metadata: { name: string };
  spec?: {
    replicas?: number;
    selector?: { matchLabels?: Record<string, string> };
    template?: {
      metadata: { labels: Record<string, string> };
      spec: { containers: { image: string; env?: { name: string }[] }[] };
    };
  };
  data?: Record<string, string>;
}

function k8sObjects(): K8sObject[] {
  return files(join(DEPLOY, 'kubernetes'), /\.ya?ml$/)
    .filter((f) => !f.endsWith('nats-values.yaml') && !f.endsWith('kustomization.yaml'))
    .flatMap((f) => load(f) as unknown as K8sObject[])
    .filter((o) => o !== null && typeof o.kind === 'string');
}

test('Kubernetes: 2 persisters, a budget for each role that selects its pods, only known settings, pinned images', () => {
  const objects = k8sObjects();
  const names = configNames();
  const deployments = objects.filter((o) => o.kind === 'Deployment');
  const byRole = new Map(
    deployments.map((d) => [d.spec?.template?.metadata.labels['app.kubernetes.io/component'], d]),
  );
  assert.equal(byRole.get('persister')?.spec?.replicas, 2);
  const budgets = objects.filter((o) => o.kind === 'PodDisruptionBudget');
  for (const role of ['ingest', 'fanout', 'persister']) {
    const d = byRole.get(role);
    assert.ok(d, `a ${role} Deployment`);
    const labels = d.spec?.template?.metadata.labels ?? {};
    const pdb = budgets.find((b) =>
      Object.entries(b.spec?.selector?.matchLabels ?? {}).every(([k, v]) => labels[k] === v),
    );
    assert.ok(pdb, `a PodDisruptionBudget selects the ${role} pods`);
    for (const c of d.spec?.template?.spec.containers ?? []) {
      for (const e of c.env ?? []) assert.ok(names.has(e.name), `${role}: ${e.name} is no setting`);
    }
  }
  const configMap = objects.find((o) => o.kind === 'ConfigMap' && o.metadata.name === 'runstream');
  for (const key of Object.keys(configMap?.data ?? {}))
    assert.ok(names.has(key), `ConfigMap runstream: ${key}`);
  assert.equal(configMap?.data?.RS_STREAM_REPLICAS, '3');

  // Every image named is pinned (runstream's own is set by kustomization.yaml).
  for (const o of objects) {
    for (const c of o.spec?.template?.spec.containers ?? []) {
      if (c.image !== 'runstream') checkPinned(c.image, `${o.kind} ${o.metadata.name}`);
    }
  }
  const [kustomization] = load(join(DEPLOY, 'kubernetes', 'kustomization.yaml')) as {
    resources: string[];
  }[];
  for (const r of kustomization?.resources ?? []) assert.ok(existsSync(join(DEPLOY, 'kubernetes', r)), r);
  assert.ok(kustomization?.resources.includes('disruption-budgets.yaml'));

  const [values] = load(join(DEPLOY, 'kubernetes', 'nats-values.yaml')) as {
    container: { image: { repository: string; tag: string } };
    config: { cluster: { replicas: number }; jetstream: { merge?: { sync_interval?: string } } };
  }[];
  assert.equal(values?.container.image.repository, 'nats');
  natsTagOk(values?.container.image.tag ?? '', 'nats-values.yaml');
  assert.equal(values?.config.cluster.replicas, 3);
  assert.equal(values?.config.jetstream.merge?.sync_interval, 'always');
});

test('the image runs Node 24 LTS', () => {
  assert.match(readFileSync(join(DEPLOY, 'Dockerfile'), 'utf8'), /^ARG NODE_IMAGE=node:24-slim$/m);
});

test('deploy/nats/cluster.conf is a valid nats-server configuration (checked by the local nats-server)', (t) => {
  let version: string;
  try {
    version = execFileSync('nats-server', ['--version'], { encoding: 'utf8' });
  } catch {
    t.skip('no nats-server on PATH');
    return;
  }
  const [, major, minor] = /v(\d+)\.(\d+)/.exec(version) ?? [];
  let conf = readFileSync(join(DEPLOY, 'nats', 'cluster.conf'), 'utf8');
  // sync_interval came with 2.10; an older server (Debian's 2.9) checks the rest.
  if (Number(major) === 2 && Number(minor) < 10) conf = conf.replace(/^\s*sync_interval: .*$/m, '');
  const dir = mkdtempSync(join(tmpdir(), 'rs-nats-conf-'));
  try {
    writeFileSync(join(dir, 'cluster.conf'), conf);
    const r = spawnSync('nats-server', ['-c', join(dir, 'cluster.conf'), '-t'], {
      encoding: 'utf8',
      env: { ...process.env, NATS_SERVER_NAME: 'nats-1' },
    });
    assert.equal(r.status, 0, r.stderr);
    assert.match(r.stdout + r.stderr, /is valid/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
