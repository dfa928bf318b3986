-- rs_store_rows: the persister's fast path (src/persist/batch-assigner.ts) with its text
-- columns sent as ONE text each instead of a text[] each: the elements joined by the ASCII
-- record separator (0x1E), each element preceded by it, and a NULL element written as the unit
-- separator (0x1F) alone in a column that may hold NULLs. The function splits them back with
-- string_to_array and then does what rs_store_batch (migrations 0009, 0010) does, in the same
-- steps and order, with the same results.
--
-- Why: a text[] parameter is an array literal. node-postgres builds it by escaping every element
-- (two regular-expression passes and a quoted copy each, numbers included) and Postgres' array_in
-- reads every quote and backslash back; an event's content is JSON, full of both. Joined, the
-- client copies each element once and Postgres splits at one byte. Measured on the persister's
-- batches: node-postgres' array encoding was 6-9% of the persister's CPU at one event per
-- request (docs/benchmarks.md, "Token rates, seventh round").
--
-- The separators cannot occur in what the broker stores: ids, event types, categories and time
-- texts are restricted to printable ASCII (domain/ids.ts, domain/event.ts, domain/time-text.ts),
-- and JSON text holds no raw control character (RFC 8259: inside a string they are escaped,
-- and they are not whitespace). A log message that breaks this anyway (ingest validates; a
-- message put on the log by something else may not) makes its column split into more elements
-- than the others: every column's length is checked against the batch's, and a batch whose
-- columns do not line up raises RS002, so it goes through the multi-statement transaction,
-- which takes real arrays and refuses the bad text with its own error (persist/poison.ts).
--
-- The function is rs_store_batch's body (migration 0010: its comments hold) on split columns, with
-- that check first. Number and boolean columns stay arrays: the persister writes their literals itself
-- ('{1,2,3}'), which need no escaping. rs_store_batch stays as it was, for a persister of the
-- previous version during a rolling upgrade. (A wrapper that split the columns and called
-- rs_store_batch cost Postgres ~0.4 ms more per call: 15 us an event at one event per request.)
CREATE FUNCTION rs_store_rows(
  p_stream text, p_member text, p_partitions int[], p_epochs int8[], p_upto int8[],
  -- each thread of the events once, and its lowest offset
  p_threads text, p_first_offsets int8[],
  e_thread text, e_ordinal int8[], e_event_id text, e_run_id text, e_event_type text,
  e_category int2[], e_user_id text, e_created_at text, e_content text, e_metadata text,
  e_offset int8[], e_category_name text, e_created_at_text text,
  -- runs.ts RunDelta per (thread, run); r_first, r_last, r_end relative to the thread's head
  r_thread text, r_run_id text, r_user_id text, r_status text, r_explicit bool[],
  r_first int8[], r_last int8[], r_end int8[], r_events int8[], r_messages int8[], r_traces int8[],
  r_lifecycles int8[], r_started_at text, r_updated_at text, r_ended_at text,
  r_metadata text, r_outcome text, r_mixed bool[], r_sole text
) RETURNS TABLE (o_thread text, o_head int8)
LANGUAGE plpgsql VOLATILE
SET enable_seqscan = off
AS $$
#variable_conflict use_column
DECLARE
  -- The columns split back (see the top of this file): a required one without a NULL marker,
  -- so a text that is the marker alone stays that text, as in an array.
  v_threads text[] := (string_to_array(p_threads, E'\x1e'))[2:];
  v_e_thread text[] := (string_to_array(e_thread, E'\x1e'))[2:]; v_e_event_id text[] := (string_to_array(e_event_id, E'\x1e'))[2:]; v_e_run_id text[] := (string_to_array(e_run_id, E'\x1e'))[2:];
  v_e_event_type text[] := (string_to_array(e_event_type, E'\x1e'))[2:]; v_e_user_id text[] := (string_to_array(e_user_id, E'\x1e'))[2:]; v_e_created_at text[] := (string_to_array(e_created_at, E'\x1e'))[2:];
  v_e_content text[] := (string_to_array(e_content, E'\x1e'))[2:]; v_e_metadata text[] := (string_to_array(e_metadata, E'\x1e'))[2:];
  v_e_category_name text[] := (string_to_array(e_category_name, E'\x1e', E'\x1f'))[2:]; v_e_created_at_text text[] := (string_to_array(e_created_at_text, E'\x1e', E'\x1f'))[2:];
  v_r_thread text[] := (string_to_array(r_thread, E'\x1e'))[2:]; v_r_run_id text[] := (string_to_array(r_run_id, E'\x1e'))[2:]; v_r_user_id text[] := (string_to_array(r_user_id, E'\x1e'))[2:];
  v_r_status text[] := (string_to_array(r_status, E'\x1e'))[2:]; v_r_started_at text[] := (string_to_array(r_started_at, E'\x1e'))[2:]; v_r_updated_at text[] := (string_to_array(r_updated_at, E'\x1e'))[2:];
  v_r_ended_at text[] := (string_to_array(r_ended_at, E'\x1e', E'\x1f'))[2:]; v_r_metadata text[] := (string_to_array(r_metadata, E'\x1e', E'\x1f'))[2:]; v_r_outcome text[] := (string_to_array(r_outcome, E'\x1e', E'\x1f'))[2:];
  v_r_sole text[] := (string_to_array(r_sole, E'\x1e'))[2:];
  v_lost int[];
  v_heads int8[];
  v_deleted bool;
  v_inserted int8;
BEGIN
  -- 0. Every column lines up with the others (see the top of this file).
  IF (cardinality(v_threads) <> cardinality(p_first_offsets)
      OR cardinality(e_ordinal) <> ANY (ARRAY[
           cardinality(v_e_thread), cardinality(v_e_event_id), cardinality(v_e_run_id),
           cardinality(v_e_event_type), cardinality(e_category), cardinality(v_e_user_id),
           cardinality(v_e_created_at), cardinality(v_e_content), cardinality(v_e_metadata),
           cardinality(e_offset), cardinality(v_e_category_name), cardinality(v_e_created_at_text)])
      OR cardinality(r_explicit) <> ANY (ARRAY[
           cardinality(v_r_thread), cardinality(v_r_run_id), cardinality(v_r_user_id), cardinality(v_r_status),
           cardinality(r_first), cardinality(r_last), cardinality(r_end), cardinality(r_events),
           cardinality(r_messages), cardinality(r_traces), cardinality(r_lifecycles),
           cardinality(v_r_started_at), cardinality(v_r_updated_at), cardinality(v_r_ended_at),
           cardinality(v_r_metadata), cardinality(v_r_outcome), cardinality(r_mixed),
           cardinality(v_r_sole)])) IS NOT FALSE THEN
    RAISE EXCEPTION 'batch columns do not line up (a separator in a text): store it in the slow path'
      USING ERRCODE = 'RS002';
  END IF;

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
     FROM (SELECT DISTINCT hashtextextended(t, 0) AS k FROM unnest(v_threads) AS t ORDER BY k) s;

  -- 3. Heads, under the locks (a fresh snapshot: see above), and whether anything needs the slow path.
  SELECT array_agg(GREATEST((SELECT COALESCE(max(e.seq), 0) FROM run_events e WHERE e.thread_id = t.thread_id),
                            COALESCE(h.head_seq, 0))::int8 ORDER BY t.ord),
         COALESCE(bool_or(t.first_offset <= GREATEST(h.deleted_upto_offset, h.run_deleted_upto_offset)), false)
    INTO v_heads, v_deleted
    FROM unnest(v_threads, p_first_offsets) WITH ORDINALITY AS t(thread_id, first_offset, ord)
    LEFT JOIN LATERAL (SELECT th.head_seq, th.deleted_upto_offset, th.run_deleted_upto_offset
                         FROM thread_heads th WHERE th.thread_id = t.thread_id LIMIT 1) h ON true;
  IF v_deleted THEN
    RAISE EXCEPTION 'batch holds deleted history: store it in the slow path' USING ERRCODE = 'RS002';
  END IF;

  -- 4. The insert and runs (batch-assigner.ts INSERT_AND_RECORD_SQL, seqs from the heads).
  WITH hd AS (
    SELECT * FROM unnest(v_threads, v_heads) AS hd(thread_id, head)
  ), ins AS (
    INSERT INTO run_events
      (thread_id, seq, event_id, run_id, event_type, category, user_id, created_at, content, metadata,
       stream_offset, category_name, created_at_text)
    SELECT x.thread_id, hd.head + x.ordinal, x.event_id, x.run_id, x.event_type, x.category, x.user_id,
           x.created_at::timestamptz, x.content::json, x.metadata::json, x.stream_offset, x.category_name,
           x.created_at_text
      FROM unnest(v_e_thread, e_ordinal, v_e_event_id, v_e_run_id, v_e_event_type, e_category, v_e_user_id,
                  v_e_created_at, v_e_content, v_e_metadata, e_offset, v_e_category_name, v_e_created_at_text)
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
      FROM unnest(v_r_thread, v_r_run_id, v_r_user_id, v_r_status, r_explicit, r_first, r_last, r_end,
                  r_events, r_messages, r_traces, r_lifecycles, v_r_started_at, v_r_updated_at, v_r_ended_at,
                  v_r_metadata, v_r_outcome, r_mixed, v_r_sole)
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
  IF v_inserted <> cardinality(e_ordinal) THEN
    RAISE EXCEPTION 'batch holds stored events: store it in the slow path' USING ERRCODE = 'RS002';
  END IF;

  -- 5. Each thread's head from before the insert: the JS numbers its events from it.
  RETURN QUERY SELECT * FROM unnest(v_threads, v_heads);
END
$$;
