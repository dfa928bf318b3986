/**
 * An {@link Authenticator} that counts refusals (`runstream_auth_refusals_total`): tokens
 * refused (missing, invalid, expired) and rights refused (a principal answering no to
 * `canRead` / `canPublish` / `canCancel`, which every surface asks before acting).
 */
import type { Counter } from 'prom-client';
import { ErrorCode, toRunstreamError } from '../errors.js';
import type { Authenticator, Principal } from './principal.js';

export function countingAuthenticator(auth: Authenticator, refusals: Counter<'reason'>): Authenticator {
  if (!auth.enabled) return auth;
  for (const reason of ['unauthenticated', 'token_expired', 'permission_denied']) refusals.inc({ reason }, 0);
  const denied = (): false => {
    refusals.inc({ reason: 'permission_denied' });
    return false;
  };
  return {
    enabled: true,
    async authenticate(token) {
      let p: Principal;
      try {
        p = await auth.authenticate(token);
      } catch (err) {
        // A key set that cannot be fetched (RS_JWT_JWKS_URL) is no refusal of the token.
        const { code } = toRunstreamError(err);
        if (code === ErrorCode.TokenExpired) refusals.inc({ reason: 'token_expired' });
        else if (code === ErrorCode.Unauthenticated) refusals.inc({ reason: 'unauthenticated' });
        throw err;
      }
      return {
        subject: p.subject,
        userId: p.userId,
        expiresAtMs: p.expiresAtMs,
        canRead: (threadId) => p.canRead(threadId) || denied(),
        readable: p.readable,
        canPublish: (threadId) => p.canPublish(threadId) || denied(),
        canCancel: (threadId) => p.canCancel(threadId) || denied(),
      };
    },
  };
}
