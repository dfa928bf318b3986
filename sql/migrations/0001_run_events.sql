-- The event log of every thread: the system of record.
--
-- seq is the event's place in its thread: 1, 2, 3, ... with no gap, assigned by the
-- persister under pg_advisory_xact_lock(hashtextextended(thread_id, 0)).
-- content and metadata are `json`, not `jsonb`: they keep the producer's exact text, so
-- a replayed event is byte-identical to the live one, and inserting skips a conversion.
CREATE TABLE run_events (
  thread_id     text        NOT NULL,
  seq           bigint      NOT NULL CHECK (seq > 0),
  event_id      text        NOT NULL,
  run_id        text        NOT NULL,
  event_type    text        NOT NULL,
  category      smallint    NOT NULL CHECK (category BETWEEN 1 AND 3),
  user_id       text        NOT NULL DEFAULT '',
  created_at    timestamptz NOT NULL,
  content       json        NOT NULL,
  metadata      json        NOT NULL,
  -- JetStream stream sequence of the log message this row was made from.
  stream_offset bigint      NOT NULL,
  stored_at     timestamptz NOT NULL DEFAULT now(),
  CONSTRAINT run_events_pkey PRIMARY KEY (thread_id, seq),
  CONSTRAINT run_events_event_id_key UNIQUE (thread_id, event_id)
);

-- A run's events in order, without scanning the rest of the thread.
CREATE INDEX run_events_run_seq_idx ON run_events (thread_id, run_id, seq);
