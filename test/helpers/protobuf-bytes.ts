/**
 * A minimal protobuf wire-format writer for fuzz tests: fields are written exactly as given
 * (any varint, any bytes in a string field, unknown fields, wrong wire types), which a
 * schema-driven encoder refuses to do.
 */

/** Wire types (protobuf encoding spec). */
export const WIRE = { varint: 0, fixed64: 1, len: 2, startGroup: 3, endGroup: 4, fixed32: 5 } as const;

export function varint(n: bigint | number): Buffer {
  let v = BigInt.asUintN(64, BigInt(n));
  const out: number[] = [];
  do {
    let byte = Number(v & 0x7fn);
    v >>= 7n;
    if (v !== 0n) byte |= 0x80;
    out.push(byte);
  } while (v !== 0n);
  return Buffer.from(out);
}

export function tag(field: number, wire: number): Buffer {
  return varint((BigInt(field) << 3n) | BigInt(wire));
}

/** A length-delimited field: a string, bytes or an embedded message. */
export function lenField(field: number, bytes: Buffer | string): Buffer {
  const b = Buffer.from(bytes);
  return Buffer.concat([tag(field, WIRE.len), varint(b.length), b]);
}

/** A varint field; negative numbers are written as int64 two's complement (10 bytes). */
export function varintField(field: number, v: bigint | number): Buffer {
  return Buffer.concat([tag(field, WIRE.varint), varint(v)]);
}

export const message = (...fields: Buffer[]): Buffer => Buffer.concat(fields);
