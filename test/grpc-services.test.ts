// gRPC health checking (grpc.health.v1) and server reflection are served beside Ingest.
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { test } from 'node:test';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import { protoPath as healthProtoPath } from 'grpc-health-check';
import { startStack } from './helpers/stack.js';

const require = createRequire(import.meta.url);
const REFLECTION_PROTO = require.resolve('@grpc/reflection/build/proto/grpc/reflection/v1/reflection.proto');

type Ctor = new (
  target: string,
  creds: grpc.ChannelCredentials,
) => grpc.Client & Record<string, CallableFunction>;

function service(protoFile: string, path: string[]): Ctor {
  const def = grpc.loadPackageDefinition(protoLoader.loadSync(protoFile, { keepCase: true, enums: String }));
  return path.reduce(
    (o: Record<string, unknown>, k) => o[k] as Record<string, unknown>,
    def,
  ) as unknown as Ctor;
}

test('health reports SERVING; reflection lists runstream.v1.Ingest and serves its descriptor', async () => {
  await using stack = await startStack();
  const Health = service(healthProtoPath, ['grpc', 'health', 'v1', 'Health']);
  const health = new Health(stack.grpcTarget, grpc.credentials.createInsecure());
  for (const name of ['', 'runstream.v1.Ingest']) {
    const res = await new Promise<{ status: string }>((resolve, reject) =>
      (health.Check as CallableFunction)({ service: name }, (err: Error | null, r: { status: string }) =>
        err ? reject(err) : resolve(r),
      ),
    );
    assert.equal(res.status, 'SERVING', `health of ${JSON.stringify(name)}`);
  }
  health.close();

  const Reflection = service(REFLECTION_PROTO, ['grpc', 'reflection', 'v1', 'ServerReflection']);
  const reflection = new Reflection(stack.grpcTarget, grpc.credentials.createInsecure());
  const call = (reflection.ServerReflectionInfo as CallableFunction)() as grpc.ClientDuplexStream<
    object,
    Record<string, unknown>
  >;
  const answers: Record<string, unknown>[] = [];
  const done = new Promise<void>((resolve, reject) => {
    call.on('data', (d: Record<string, unknown>) => answers.push(d));
    call.on('end', resolve);
    call.on('error', reject);
  });
  call.write({ list_services: '' });
  call.write({ file_containing_symbol: 'runstream.v1.Ingest' });
  call.end();
  await done;
  reflection.close();
  const [listed, described] = answers as [Record<string, unknown>, Record<string, unknown>];
  const services = (listed.list_services_response as { service: { name: string }[] }).service.map(
    (s) => s.name,
  );
  assert.ok(services.includes('runstream.v1.Ingest'), services.join(', '));
  const files = (described.file_descriptor_response as { file_descriptor_proto: Buffer[] })
    .file_descriptor_proto;
  const text = files.map((f) => Buffer.from(f).toString('latin1')).join('\n');
  assert.match(text, /runstream\.v1/);
  assert.match(text, /PublishStream/);
});
