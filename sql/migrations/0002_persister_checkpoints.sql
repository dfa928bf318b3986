-- How far the persister has stored the JetStream log: every message with a stream
-- sequence <= last_offset is committed in run_events (or was a duplicate). On start the
-- persister replays the log in order from last_offset + 1; whatever it meets again is
-- recognised by (thread_id, event_id) and takes no seq. Keeping the position here,
-- rather than in a durable consumer's ack state, is what keeps a thread's events in log
-- order across crashes: JetStream redelivers unacked messages only after ack_wait, out
-- of order with newer ones, while a replay from a position is strictly ordered.
CREATE TABLE persister_checkpoints (
  stream      text        PRIMARY KEY,
  last_offset bigint      NOT NULL,
  updated_at  timestamptz NOT NULL DEFAULT now()
);
