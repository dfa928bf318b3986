-- rs_store_batch (migration 0009) again, with the same signature and results, but with
-- plans that stay index lookups whatever the planner's statistics say. PL/pgSQL caches a
-- generic plan per statement in each session, kept until the tables' statistics change (an
-- ANALYZE, autovacuum's included); made while run_events, runs or thread_heads were new and
-- never analysed (a fresh database, a restore, a table that grew fast before autovacuum's first
-- ANALYZE), the check for stored events was a hash join over a sequential scan of run_events on
-- every batch: a cost growing with all the history kept (pg_stat_statements: 1.3-1.7 ms of a
-- 3.3-4.2 ms call with 45,000 rows stored).
--
--  - No separate check: the insert finds an event stored before itself, as
--    `ON CONFLICT (thread_id, event_id) DO NOTHING`, which probes the unique index it names
--    whatever the statistics; when it inserted fewer rows than it was given, the function raises
--    RS002 as before, and the whole statement (fence, insert, runs) rolls back. (A LATERAL probe
--    per event was tried: on a never-analysed table the planner may take the (thread_id,
--    stream_offset) index and filter the thread's rows, worse still.)
--  - thread_heads is read per thread by a LATERAL subquery on its primary key.
--  - `SET enable_seqscan = off` for the function's statements: the runs update and the fence
--    reach their few rows in runs and log_partitions through an index, not by scanning the
--    table (without statistics the runs update may take (thread_id, first_seq) and filter the
--    thread's runs; with them, the primary key). Only these statements are planned under it
--    (the caller's setting is back at return).
-- The insert now runs before an event stored before is noticed: a batch holding one does its
-- writes, rolls them back and goes the slow way. Such batches are rare (a partition's position
-- moves in the same statement as its events, so a restart or a takeover reads on from what was
-- stored; only a producer's retry after JetStream's duplicate window brings one), and a stored
-- event whose new copy holds bad data (a forged log message: ingest validates) fails with that
-- data's error; the persister's isolation of bad events then finds it stored: a duplicate, no
-- seq, no dead letter.
-- The order of the steps is otherwise 0009's, and its comments hold.
CREATE OR REPLACE FUNCTION rs_store_batch(
  p_stream text, p_member text, p_partitions int[], p_epochs int8[], p_upto int8[],
  -- each thread of the events once, and its lowest offset
  p_threads text[], p_first_offsets int8[],
  e_thread text[], e_ordinal int8[], e_event_id text[], e_run_id text[], e_event_type text[],
  e_category int2[], e_user_id text[], e_created_at text[], e_content text[], e_metadata text[],
  e_offset int8[], e_category_name text[], e_created_at_text text[],
  -- runs.ts RunDelta per (thread, run); r_first, r_last, r_end relative to the thread's head
  r_thread text[], r_run_id text[], r_user_id text[], r_status text[], r_explicit bool[],
  r_first int8[], r_last int8[], r_end int8[], r_events int8[], r_messages int8[], r_traces int8[],
  r_lifecycles int8[], r_started_at text[], r_updated_at text[], r_ended_at text[],
  r_metadata text[], r_outcome text[], r_mixed bool[], r_sole text[]
) RETURNS TABLE (o_thread text, o_head int8)
LANGUAGE plpgsql VOLATILE
SET enable_seqscan = off
AS $$
#variable_conflict use_column
DECLARE
  v_lost int[];
  v_heads int8[];
  v_deleted bool;
  v_inserted int8;
BEGIN
  -- 1. The fence, first.
  IF cardinality(p_partitions) > 0 THEN
    WITH moved AS (
      UPDATE log_partitions p SET last_offset = x.upto
        FROM unnest(p_partitions, p_epochs, p_upto) AS x(partition, epoch, upto)
       WHERE p.stream = p_stream AND p.owner = p_member AND p.partition = x.partition AND p.epoch = x.epoch
      RETURNING p.partition
    )
    SELECT array_agg(x.partition ORDER BY x.partition) INTO v_lost
      FROM unnest(p_partitions) AS x(partition)
     WHERE NOT EXISTS (SELECT 1 FROM moved m WHERE m.partition = x.partition);
    IF v_lost IS NOT NULL THEN
      RAISE EXCEPTION 'partition leases taken over: %', array_to_string(v_lost, ', ')
        USING ERRCODE = 'RS001', DETAIL = array_to_string(v_lost, ',');
    END IF;
  END IF;

  -- 2. The threads' advisory locks, in key order (no deadlock between overlapping batches).
  PERFORM pg_advisory_xact_lock(k)
     FROM (SELECT DISTINCT hashtextextended(t, 0) AS k FROM unnest(p_threads) AS t ORDER BY k) s;

  -- 3. Heads, under the locks (a fresh snapshot: see above), and whether anything needs the slow path.
  SELECT array_agg(GREATEST((SELECT COALESCE(max(e.seq), 0) FROM run_events e WHERE e.thread_id = t.thread_id),
                            COALESCE(h.head_seq, 0))::int8 ORDER BY t.ord),
         COALESCE(bool_or(t.first_offset <= GREATEST(h.deleted_upto_offset, h.run_deleted_upto_offset)), false)
    INTO v_heads, v_deleted
    FROM unnest(p_threads, p_first_offsets) WITH ORDINALITY AS t(thread_id, first_offset, ord)
    LEFT JOIN LATERAL (SELECT th.head_seq, th.deleted_upto_offset, th.run_deleted_upto_offset
                         FROM thread_heads th WHERE th.thread_id = t.thread_id LIMIT 1) h ON true;
  IF v_deleted THEN
    RAISE EXCEPTION 'batch holds deleted history: store it in the slow path' USING ERRCODE = 'RS002';
  END IF;

  -- 4. The insert and runs (batch-assigner.ts INSERT_AND_RECORD_SQL, seqs from the heads).
  WITH hd AS (
    SELECT * FROM unnest(p_threads, v_heads) AS hd(thread_id, head)
  ), ins AS (
    INSERT INTO run_events
      (thread_id, seq, event_id, run_id, event_type, category, user_id, created_at, content, metadata,
       stream_offset, category_name, created_at_text)
    SELECT x.thread_id, hd.head + x.ordinal, x.event_id, x.run_id, x.event_type, x.category, x.user_id,
           x.created_at::timestamptz, x.content::json, x.metadata::json, x.stream_offset, x.category_name,
           x.created_at_text
      FROM unnest(e_thread, e_ordinal, e_event_id, e_run_id, e_event_type, e_category, e_user_id, e_created_at,
                  e_content, e_metadata, e_offset, e_category_name, e_created_at_text)
           AS x(thread_id, ordinal, event_id, run_id, event_type, category, user_id, created_at, content,
                metadata, stream_offset, category_name, created_at_text)
      JOIN hd ON hd.thread_id = x.thread_id
    -- An event stored before is found by the insert itself, in the unique index it names.
    ON CONFLICT (thread_id, event_id) DO NOTHING
    RETURNING 1
  ), x AS (
    SELECT r.thread_id, r.run_id, r.user_id, r.status, r.explicit, hd.head + r.first_rel AS first_seq,
           hd.head + r.last_rel AS last_seq, hd.head + r.end_rel AS end_seq, r.events, r.messages, r.traces,
           r.lifecycles, r.started_at::timestamptz AS started_at, r.updated_at::timestamptz AS updated_at,
           r.ended_at::timestamptz AS ended_at, r.metadata, r.outcome, r.mixed, r.sole
      FROM unnest(r_thread, r_run_id, r_user_id, r_status, r_explicit, r_first, r_last, r_end, r_events,
                  r_messages, r_traces, r_lifecycles, r_started_at, r_updated_at, r_ended_at, r_metadata,
                  r_outcome, r_mixed, r_sole)
           AS r(thread_id, run_id, user_id, status, explicit, first_rel, last_rel, end_rel, events, messages,
                traces, lifecycles, started_at, updated_at, ended_at, metadata, outcome, mixed, sole)
      JOIN hd ON hd.thread_id = r.thread_id
  ), upd AS (
    UPDATE runs r SET
      user_id = CASE WHEN r.user_id = '' THEN x.user_id ELSE r.user_id END,
      users_mixed = r.users_mixed OR x.mixed OR x.sole <> r.user_id,
      status = CASE WHEN x.explicit THEN x.status
                    WHEN r.status = 'pending' AND x.status = 'running' THEN 'running'
                    ELSE r.status END,
      end_seq = CASE WHEN x.explicit THEN x.end_seq ELSE r.end_seq END,
      ended_at = CASE WHEN x.explicit THEN x.ended_at ELSE r.ended_at END,
      outcome = CASE WHEN x.explicit THEN x.outcome::json ELSE r.outcome END,
      metadata = COALESCE(x.metadata::json, r.metadata),
      first_seq = LEAST(r.first_seq, x.first_seq),
      last_seq = GREATEST(r.last_seq, x.last_seq),
      event_count = r.event_count + x.events,
      message_count = r.message_count + x.messages,
      trace_count = r.trace_count + x.traces,
      lifecycle_count = r.lifecycle_count + x.lifecycles,
      started_at = LEAST(r.started_at, x.started_at),
      updated_at = GREATEST(r.updated_at, x.updated_at)
    FROM x WHERE r.thread_id = x.thread_id AND r.run_id = x.run_id
    RETURNING r.thread_id, r.run_id
  ), fresh AS (
    INSERT INTO runs (thread_id, run_id, user_id, users_mixed, status, first_seq, last_seq, end_seq,
                      event_count, message_count, trace_count, lifecycle_count, started_at, updated_at,
                      ended_at, metadata, outcome)
    SELECT x.thread_id, x.run_id, x.user_id, x.mixed, x.status, x.first_seq, x.last_seq, x.end_seq, x.events,
           x.messages, x.traces, x.lifecycles, x.started_at, x.updated_at, x.ended_at,
           COALESCE(x.metadata, '{}')::json, x.outcome::json
      FROM x WHERE NOT EXISTS (SELECT 1 FROM upd WHERE upd.thread_id = x.thread_id AND upd.run_id = x.run_id)
  )
  SELECT count(*) INTO v_inserted FROM ins;
  -- An event of the batch was stored before: undo it all (fence included), the slow path sorts it out.
  IF v_inserted <> cardinality(e_thread) THEN
    RAISE EXCEPTION 'batch holds stored events: store it in the slow path' USING ERRCODE = 'RS002';
  END IF;

  -- 5. Each thread's head from before the insert: the JS numbers its events from it.
  RETURN QUERY SELECT * FROM unnest(p_threads, v_heads);
END
$$;
