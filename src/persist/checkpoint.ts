/** The persister's position in the log, kept in Postgres (see migration 0002). */
import type pg from 'pg';

export async function readCheckpoint(db: pg.Pool | pg.ClientBase, stream: string): Promise<number> {
  const { rows } = await db.query<{ last_offset: string }>(
    'SELECT last_offset FROM persister_checkpoints WHERE stream = $1',
    [stream],
  );
  return Number(rows[0]?.last_offset ?? 0);
}

/** Moves the checkpoint forward (never back: several persisters may share it). */
export async function saveCheckpoint(
  db: pg.Pool | pg.ClientBase,
  stream: string,
  offset: number,
): Promise<void> {
  await db.query({
    name: 'rs_checkpoint',
    text: `INSERT INTO persister_checkpoints (stream, last_offset) VALUES ($1, $2)
           ON CONFLICT (stream) DO UPDATE
             SET last_offset = GREATEST(persister_checkpoints.last_offset, EXCLUDED.last_offset),
                 updated_at = now()`,
    values: [stream, offset],
  });
}
