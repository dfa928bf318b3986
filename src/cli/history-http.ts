/**
 * GET requests to the broker's History API for the `threads`, `runs` and `export`
 * commands: the answer's JSON, or a {@link CommandError} with the broker's error (and a
 * hint for a refused token).
 */
import { CommandError, TOKEN_HINT } from './args.js';

export async function historyGet<T>(
  base: string,
  path: string,
  params: Record<string, string | number | undefined>,
  token: string | undefined,
): Promise<T> {
  const url = new URL(`${base}${path}`);
  for (const [k, v] of Object.entries(params)) if (v !== undefined) url.searchParams.set(k, String(v));
  let res: Response;
  try {
    res = await fetch(url, token === undefined ? {} : { headers: { authorization: `Bearer ${token}` } });
  } catch (err) {
    const cause = (err as { cause?: { message?: string } }).cause?.message;
    throw new CommandError(
      `cannot reach the broker at ${base} (${cause ?? (err as Error).message}); is it running? (--url, RS_URL)`,
    );
  }
  const text = await res.text();
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    throw new CommandError(`${url.pathname}: HTTP ${res.status}, not JSON: ${text.slice(0, 200)}`);
  }
  if (!res.ok) {
    const e = (body as { error?: { code?: string; message?: string } }).error;
    const what = `${e?.code ?? `HTTP ${res.status}`}: ${e?.message ?? text.slice(0, 200)}`;
    if (res.status === 401 || res.status === 403) throw new CommandError(`${what}\n  hint: ${TOKEN_HINT}`);
    throw new CommandError(what);
  }
  return body as T;
}
