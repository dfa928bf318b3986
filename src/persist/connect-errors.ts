/**
 * One line for a failure to reach Postgres at start-up, saying what to do: the database
 * missing (and how to create it), the server not answering, a refused login.
 */

/** The problem and its remedy, or undefined when `err` is not a connection problem. */
export function explainPostgresError(err: unknown, databaseUrl: string): string | undefined {
  const code = (err as { code?: unknown } | null)?.code;
  let url: URL | undefined;
  try {
    url = new URL(databaseUrl);
  } catch {
    url = undefined;
  }
  const db = decodeURIComponent(url?.pathname.replace(/^\//, '') || 'postgres');
  const host = url?.hostname || '127.0.0.1';
  const port = url?.port || '5432';
  const user = decodeURIComponent(url?.username || 'postgres');
  const where = `${host}:${port}`;
  switch (code) {
    case '3D000':
      return (
        `database "${db}" does not exist on ${where} (DATABASE_URL): create it with ` +
        `\`createdb -h ${host} -p ${port} -U ${user} ${db}\` (or CREATE DATABASE "${db}"), then start again`
      );
    case '28P01':
    case '28000':
      return `Postgres at ${where} refused user "${user}" (DATABASE_URL): check the user and password`;
    case 'ECONNREFUSED':
      return `cannot reach Postgres at ${where} (DATABASE_URL): connection refused; is it running?`;
    case 'ENOTFOUND':
    case 'EAI_AGAIN':
      return `cannot resolve the Postgres host "${host}" (DATABASE_URL)`;
    case 'ETIMEDOUT':
      return `Postgres at ${where} did not answer (DATABASE_URL): timed out`;
    default:
      if (/timeout exceeded when trying to connect/i.test(String(err))) {
        return `Postgres at ${where} did not answer within 5 s (DATABASE_URL)`;
      }
      return undefined;
  }
}
