-- The persister's fast path (src/persist/batch-assigner.ts): a whole batch stored by ONE
-- statement in autocommit, `SELECT * FROM rs_store_batch(...)`, instead of a transaction of
-- six round trips. The JS calls it only for a batch with no rejected event and no event_id
-- repeated within a thread; everything else, and every batch this function sends back with
-- SQLSTATE RS002, goes through the multi-statement transaction, which stays the reference.
--
-- Each step is its own statement, in the order of the slow path. That order relies on this:
-- under READ COMMITTED, a VOLATILE function takes a fresh snapshot for every statement it runs
-- ("STABLE and IMMUTABLE functions use a snapshot established as of the start of the calling
-- query, whereas VOLATILE functions obtain a fresh snapshot at the start of each query they
-- execute", PostgreSQL docs, 38.7 Function Volatility Categories, xfunc-volatility.html; and
-- 13.2.1: in Read Committed each command sees a snapshot as of its own start). So the reads
-- after the advisory locks see every earlier writer of those threads committed, exactly like
-- the slow path's statements after LOCK_SQL. Under REPEATABLE READ or SERIALIZABLE that is not
-- true (one snapshot per transaction): call it in autocommit, at the default isolation level.
--
--  1. the fence (persist/leases.ts `fence`): the partitions' rows matching owner and epoch
--     move to their new positions, and stay locked to the end of the statement; a lease not
--     held raises RS001, DETAIL the lost partitions ("0,3"), and nothing is stored;
--  2. the threads' advisory locks, in key order (batch-assigner.ts LOCK_SQL);
--  3. the heads (EXISTING_SQL); an event already stored (thread_id, event_id), or a deletion
--     horizon at or above any event's offset, raises RS002: "store it the slow way", which
--     rolls the whole statement back, the fence included;
--  4. the insert, seq = head + the event's ordinal within its thread, and in the same
--     statement the runs upkeep as batch-assigner.ts INSERT_AND_RECORD_SQL (the runs' seqs
--     come relative to the head: the head is added here). thread_heads is not written: a
--     thread's head is GREATEST(max(seq), thread_heads.head_seq), and only a deletion needs
--     head_seq (it keeps the head of what it deleted there);
--  5. each thread's head from before the insert.
-- An error of the data (a ::json cast, a timestamp) propagates with its own SQLSTATE, for
-- persist/poison.ts. Timestamps come as text and are cast here, as the slow path casts them
-- after its fence, so a bad one is met after the fence too.
CREATE FUNCTION rs_store_batch(
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
LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_column
DECLARE
  v_lost int[];
  v_heads int8[];
  v_deleted bool;
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
    LEFT JOIN thread_heads h ON h.thread_id = t.thread_id;
  IF v_deleted OR EXISTS (SELECT 1 FROM unnest(e_thread, e_event_id) AS q(thread_id, event_id)
                            JOIN run_events e ON e.thread_id = q.thread_id AND e.event_id = q.event_id) THEN
    RAISE EXCEPTION 'batch holds stored events or deleted history: store it in the slow path'
      USING ERRCODE = 'RS002';
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
  )
  INSERT INTO runs (thread_id, run_id, user_id, users_mixed, status, first_seq, last_seq, end_seq,
                    event_count, message_count, trace_count, lifecycle_count, started_at, updated_at,
                    ended_at, metadata, outcome)
  SELECT x.thread_id, x.run_id, x.user_id, x.mixed, x.status, x.first_seq, x.last_seq, x.end_seq, x.events,
         x.messages, x.traces, x.lifecycles, x.started_at, x.updated_at, x.ended_at,
         COALESCE(x.metadata, '{}')::json, x.outcome::json
    FROM x WHERE NOT EXISTS (SELECT 1 FROM upd WHERE upd.thread_id = x.thread_id AND upd.run_id = x.run_id);

  -- 5. Each thread's head from before the insert: the JS numbers its events from it.
  RETURN QUERY SELECT * FROM unnest(p_threads, v_heads);
END
$$;
