-- Events the store refused. Ingest refuses what Postgres cannot hold (JSON nesting, NUL,
-- lone surrogates), but a rule can be missed, and one refused event must not stop the log:
-- the persister isolates it (storing everything else), keeps it here with the error, and
-- stores an `event_rejected` notice in its place (notice_seq), so the thread stays
-- gap-free and subscribers see why. content and metadata are text, not json: they are
-- what json refused (NUL characters, which text cannot hold either, become U+FFFD).
CREATE TABLE dead_letters (
  thread_id     text        NOT NULL,
  event_id      text        NOT NULL,
  run_id        text        NOT NULL,
  event_type    text        NOT NULL,
  category      smallint    NOT NULL,
  user_id       text        NOT NULL,
  -- as the producer gave it (it could be what was refused)
  created_at    text        NOT NULL,
  content       text        NOT NULL,
  metadata      text        NOT NULL,
  -- JetStream stream sequence of the log message the event came in
  stream_offset bigint      NOT NULL,
  -- Postgres' error message and SQLSTATE
  error         text        NOT NULL,
  sqlstate      text        NOT NULL,
  notice_seq    bigint      NOT NULL,
  rejected_at   timestamptz NOT NULL DEFAULT now(),
  CONSTRAINT dead_letters_pkey PRIMARY KEY (thread_id, event_id)
);
