-- History: thread heads that survive deletion, deletion horizons, and runs.
--
-- All three are written by the persister in the same transaction as the events they
-- describe (src/persist/runs.ts, called from storeThreadBatch), under the thread's
-- advisory lock, and by deletions (src/history/deleter.ts) under the same lock.

-- The head of every thread: the highest seq it ever had. Deleting the tail of a thread
-- removes rows but not the head, so later events continue above it and a seq is never
-- reused (a client's cursor keeps meaning the same thing).
--
-- deleted_upto_offset: the thread was deleted at this JetStream offset. Every log message
-- of the thread at or below it belongs to the deleted past: the persister drops it when a
-- replay (or a message in flight during the delete) brings it back.
-- run_deleted_upto_offset: the highest such horizon of any deleted run of the thread;
-- only a message at or below it makes the persister look in run_deletions.
CREATE TABLE thread_heads (
  thread_id               text        PRIMARY KEY,
  head_seq                bigint      NOT NULL CHECK (head_seq >= 0),
  deleted_upto_offset     bigint      NOT NULL DEFAULT 0,
  run_deleted_upto_offset bigint      NOT NULL DEFAULT 0,
  deleted_at              timestamptz
);
INSERT INTO thread_heads (thread_id, head_seq)
  SELECT thread_id, max(seq) FROM run_events GROUP BY thread_id;

-- Deleted runs: messages of (thread_id, run_id) at or below the offset are dropped.
CREATE TABLE run_deletions (
  thread_id           text        NOT NULL,
  run_id              text        NOT NULL,
  deleted_upto_offset bigint      NOT NULL,
  deleted_at          timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (thread_id, run_id)
);

-- One row per run, derived from its events (the events stay the truth). Status rules are
-- in src/persist/runs.ts and docs/api.md.
CREATE TABLE runs (
  thread_id       text        NOT NULL,
  run_id          text        NOT NULL,
  -- user_id of the run's first event that has one
  user_id         text        NOT NULL DEFAULT '',
  -- the run holds events of more than one user_id ('' counting as one): user-scoped counts
  -- of such a run look at its rows; of any other run, at its counters
  users_mixed     boolean     NOT NULL DEFAULT false,
  status          text        NOT NULL
                  CHECK (status IN ('pending', 'running', 'success', 'error', 'interrupted', 'cancelled')),
  first_seq       bigint      NOT NULL,
  last_seq        bigint      NOT NULL,
  -- seq of the terminal event that set the status; NULL while the run has not ended
  end_seq         bigint,
  event_count     bigint      NOT NULL,
  message_count   bigint      NOT NULL,
  trace_count     bigint      NOT NULL,
  lifecycle_count bigint      NOT NULL,
  started_at      timestamptz NOT NULL,
  updated_at      timestamptz NOT NULL,
  ended_at        timestamptz,
  -- content of the latest start event when it is an object
  metadata        json        NOT NULL DEFAULT '{}',
  -- content of the terminal event
  outcome         json,
  CONSTRAINT runs_pkey PRIMARY KEY (thread_id, run_id)
);
-- ListRuns: a thread's runs newest first.
CREATE INDEX runs_thread_first_seq_idx ON runs (thread_id, first_seq);

-- Runs of events stored before this migration. Status from each run's latest start or
-- terminal lifecycle event (the persister's rules in full apply from now on).
WITH agg AS (
  SELECT thread_id, run_id, min(seq) AS first_seq, max(seq) AS last_seq, count(*) AS n,
         count(*) FILTER (WHERE category = 1) AS m,
         count(*) FILTER (WHERE category = 2) AS t,
         count(*) FILTER (WHERE category = 3) AS l,
         min(created_at) AS started_at, max(created_at) AS updated_at,
         COALESCE((array_agg(user_id ORDER BY seq) FILTER (WHERE user_id <> ''))[1], '') AS user_id,
         count(DISTINCT user_id) > 1 AS users_mixed
    FROM run_events GROUP BY thread_id, run_id
), last AS (
  SELECT DISTINCT ON (thread_id, run_id) thread_id, run_id, seq, event_type, created_at, content,
         CASE WHEN json_typeof(content) = 'object' THEN content->>'status' END AS said
    FROM run_events
   WHERE category = 3 AND event_type IN ('metadata', 'run_start', 'start', 'run_started', 'end', 'run_end',
         'error', 'run_error', 'cancelled', 'run_cancelled', 'interrupted', 'run_interrupted')
   ORDER BY thread_id, run_id, seq DESC
), st AS (
  SELECT last.*,
         CASE
           WHEN event_type IN ('metadata', 'run_start', 'start', 'run_started') THEN 'running'
           WHEN event_type IN ('error', 'run_error') THEN 'error'
           WHEN event_type IN ('cancelled', 'run_cancelled') THEN 'cancelled'
           WHEN event_type IN ('interrupted', 'run_interrupted') THEN 'interrupted'
           WHEN said IN ('error', 'failed', 'failure', 'timeout') THEN 'error'
           WHEN said IN ('cancelled', 'canceled', 'aborted') THEN 'cancelled'
           WHEN said IN ('interrupted', 'interrupt') THEN 'interrupted'
           ELSE 'success'
         END AS status
    FROM last
)
INSERT INTO runs (thread_id, run_id, user_id, users_mixed, status, first_seq, last_seq, end_seq, event_count,
                  message_count, trace_count, lifecycle_count, started_at, updated_at, ended_at, outcome)
SELECT agg.thread_id, agg.run_id, agg.user_id, agg.users_mixed, COALESCE(st.status, 'running'), agg.first_seq, agg.last_seq,
       CASE WHEN st.status <> 'running' THEN st.seq END, agg.n, agg.m, agg.t, agg.l,
       agg.started_at, agg.updated_at,
       CASE WHEN st.status <> 'running' THEN st.created_at END,
       CASE WHEN st.status <> 'running' THEN st.content END
  FROM agg LEFT JOIN st USING (thread_id, run_id);
