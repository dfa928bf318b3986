/**
 * Verification keys: reading and checking them (for config validation, so a bad key
 * fails start-up naming its field) and the JWS algorithms each key may verify.
 *
 * The algorithms are derived from the key, never taken from the token, so a token cannot
 * choose a weaker or mismatched algorithm (the classic `alg` confusion attacks).
 */
import { createPrivateKey, createPublicKey, type JsonWebKeyInput, type KeyObject } from 'node:crypto';
import { readFileSync } from 'node:fs';

/** RFC 7518 §3.2: an HMAC key at least as long as the hash output. */
export const MIN_HMAC_SECRET_BYTES = 32;
/** RSA keys shorter than this are refused (NIST SP 800-131A). */
export const MIN_RSA_MODULUS_BITS = 2048;

export const HMAC_ALGORITHMS = ['HS256', 'HS384', 'HS512'] as const;

/** Thrown with a message meant to follow the field's name in a config error. */
export class KeyProblem extends Error {
  override name = 'KeyProblem';
}

/**
 * `RS_JWT_PUBLIC_KEY` is either the PEM text itself or the path of a PEM file. Container
 * environments often carry PEM with literal `\n` escapes; those are turned into newlines.
 */
export function readPublicKeyPem(valueOrPath: string): string {
  if (valueOrPath.includes('-----BEGIN')) {
    return valueOrPath.includes('\n') ? valueOrPath : valueOrPath.replaceAll('\\n', '\n');
  }
  try {
    return readFileSync(valueOrPath, 'utf8');
  } catch (err) {
    throw new KeyProblem(
      `is neither PEM text nor a readable file (${(err as NodeJS.ErrnoException).code ?? String(err)})`,
    );
  }
}

/** Parses a PEM public key (SPKI, PKCS#1 or an X.509 certificate) and checks it is fit to verify tokens. */
export function parsePublicKey(pem: string): KeyObject {
  if (isPrivateKey(pem)) {
    throw new KeyProblem('is a private key; give the broker only the public key');
  }
  let key: KeyObject;
  try {
    key = createPublicKey(pem);
  } catch (err) {
    throw new KeyProblem(`is not a PEM public key (${(err as Error).message})`);
  }
  algorithmsForKey(key);
  return key;
}

function isPrivateKey(pem: string): boolean {
  try {
    createPrivateKey(pem);
    return true;
  } catch {
    return false;
  }
}

/** The JWS algorithms a public key verifies; throws a {@link KeyProblem} for a key type not supported. */
export function algorithmsForKey(key: KeyObject): string[] {
  switch (key.asymmetricKeyType) {
    case 'rsa': {
      const bits = key.asymmetricKeyDetails?.modulusLength ?? 0;
      if (bits < MIN_RSA_MODULUS_BITS) {
        throw new KeyProblem(`is a ${bits}-bit RSA key; at least ${MIN_RSA_MODULUS_BITS} bits are required`);
      }
      return ['RS256', 'RS384', 'RS512', 'PS256', 'PS384', 'PS512'];
    }
    case 'ec':
      switch (key.asymmetricKeyDetails?.namedCurve) {
        case 'prime256v1':
          return ['ES256'];
        case 'secp384r1':
          return ['ES384'];
        case 'secp521r1':
          return ['ES512'];
        default:
          throw new KeyProblem(
            `is an EC key on ${key.asymmetricKeyDetails?.namedCurve}; P-256, P-384 or P-521 is required`,
          );
      }
    case 'ed25519':
      return ['EdDSA', 'Ed25519'];
    default:
      throw new KeyProblem(
        `is a ${key.asymmetricKeyType} key; RSA, EC (P-256/384/521) or Ed25519 is required`,
      );
  }
}

/** A JSON Web Key Set as read from a file. */
export interface JwksDocument {
  keys: Record<string, unknown>[];
}

/** Members only a private or symmetric JWK has: such a key must never sit in the broker's key file. */
const SECRET_JWK_MEMBERS = ['d', 'p', 'q', 'dp', 'dq', 'qi', 'k'];

/** Reads and checks a JWKS file: JSON, a non-empty `keys` array of importable public signing keys. */
export function readJwksFile(path: string): JwksDocument {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (err) {
    throw new KeyProblem(`cannot be read (${(err as NodeJS.ErrnoException).code ?? String(err)})`);
  }
  let doc: unknown;
  try {
    doc = JSON.parse(text);
  } catch {
    throw new KeyProblem('is not valid JSON');
  }
  const keys = (doc as { keys?: unknown } | null)?.keys;
  if (!Array.isArray(keys) || keys.length === 0) {
    throw new KeyProblem('must be a JWKS document: {"keys": [ ...at least one key... ]}');
  }
  keys.forEach((jwk: unknown, i) => {
    if (jwk === null || typeof jwk !== 'object' || Array.isArray(jwk)) {
      throw new KeyProblem(`keys[${i}] is not a JSON object`);
    }
    const secret = SECRET_JWK_MEMBERS.find((m) => m in jwk);
    if (secret !== undefined) {
      throw new KeyProblem(`keys[${i}] has private member "${secret}"; the file must hold public keys only`);
    }
    let key: KeyObject;
    try {
      key = createPublicKey({ key: jwk as JsonWebKeyInput['key'], format: 'jwk' });
    } catch (err) {
      throw new KeyProblem(`keys[${i}] is not a usable public key (${(err as Error).message})`);
    }
    try {
      algorithmsForKey(key);
    } catch (err) {
      throw new KeyProblem(`keys[${i}] ${(err as Error).message}`);
    }
  });
  return { keys: keys as Record<string, unknown>[] };
}

/** Checks an HMAC secret's length (bytes of its UTF-8 text). */
export function checkHmacSecret(secret: string): void {
  const bytes = Buffer.byteLength(secret, 'utf8');
  if (bytes < MIN_HMAC_SECRET_BYTES) {
    throw new KeyProblem(
      `is ${bytes} bytes; HS256 needs a secret of at least ${MIN_HMAC_SECRET_BYTES} bytes`,
    );
  }
}
