-- `from_offset` cursors: a thread's first event at or after a JetStream offset.
CREATE INDEX run_events_offset_idx ON run_events (thread_id, stream_offset);
