// Configuration fails fast and names every bad field.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ConfigError, DEFAULT_GRPC_PORT, DEFAULT_HTTP_PORT, loadConfig } from '../src/config.js';

test('defaults when the environment is empty', () => {
  const c = loadConfig({});
  assert.equal(c.grpcPort, DEFAULT_GRPC_PORT);
  assert.equal(c.httpPort, DEFAULT_HTTP_PORT);
  assert.deepEqual([...c.roles].sort(), ['fanout', 'ingest', 'persister']);
  assert.ok(Object.isFrozen(c));
});

test('every bad field is named at once', () => {
  assert.throws(
    () =>
      loadConfig({
        GRPC_PORT: 'x',
        HTTP_PORT: '70000',
        DATABASE_URL: 'mysql://nope',
        RS_ROLES: 'ingest,cook',
        RS_MAX_CONTENT_BYTES: '1.5',
      }),
    (err: unknown) => {
      assert.ok(err instanceof ConfigError);
      const fields = err.problems.map((p) => p.split(/[=:]/)[0]);
      assert.deepEqual(fields.sort(), [
        'DATABASE_URL',
        'GRPC_PORT',
        'HTTP_PORT',
        'RS_MAX_CONTENT_BYTES',
        'RS_ROLES',
      ]);
      return true;
    },
  );
});

test('roles can be split across processes', () => {
  assert.deepEqual([...loadConfig({ RS_ROLES: 'persister' }).roles], ['persister']);
  assert.throws(() => loadConfig({ RS_ROLES: ' , ' }), /at least one role/);
});
