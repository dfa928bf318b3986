/** Loads the wire contract from `proto/` (the source of truth) at run time. */
import { readdirSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import type { ProtoGrpcType } from './gen/runstream.js';

export const PROTO_DIR = fileURLToPath(new URL('../../proto/', import.meta.url));
/** Every file of the `runstream.v1` package (each service area has its own file). */
export const PROTO_FILES: readonly string[] = readdirSync(`${PROTO_DIR}runstream/v1`)
  .filter((f) => f.endsWith('.proto'))
  .sort()
  .map((f) => `runstream/v1/${f}`);

export const PROTO_LOADER_OPTIONS: protoLoader.Options = {
  keepCase: true,
  longs: Number,
  enums: String,
  defaults: true,
  oneofs: true,
  includeDirs: [PROTO_DIR],
};

let cached: { packageDefinition: protoLoader.PackageDefinition; proto: ProtoGrpcType } | undefined;

export function loadProto(): { packageDefinition: protoLoader.PackageDefinition; proto: ProtoGrpcType } {
  if (!cached) {
    const packageDefinition = protoLoader.loadSync([...PROTO_FILES], PROTO_LOADER_OPTIONS);
    const proto = grpc.loadPackageDefinition(packageDefinition) as unknown as ProtoGrpcType;
    cached = { packageDefinition, proto };
  }
  return cached;
}
