-- The log's partitions (domain/partition.ts) and who stores each (persist/leases.ts).
--
-- log_layout: one row per log stream, written by the first persister of this version: its
-- partition count (every persister must agree with it), and whether the messages written
-- before partitions have all been stored (persist/legacy-log.ts). persister_checkpoints keeps
-- the position of that older, single-reader layout.
CREATE TABLE log_layout (
  stream         text        PRIMARY KEY,
  partitions     int         NOT NULL CHECK (partitions > 0),
  legacy_drained boolean     NOT NULL DEFAULT false,
  created_at     timestamptz NOT NULL DEFAULT now()
);

-- One row per partition: its position (every message of the partition with a stream
-- sequence <= last_offset is stored) and its lease. The persister holding the lease (owner,
-- epoch, until expires_at) is the only one that may store the partition: its seq
-- transaction updates this row, matching owner and epoch, before anything else, so a
-- persister whose lease was taken over (a new epoch) can never commit again, and a takeover
-- waits for the transaction in flight. Times are Postgres's own (now()), never a process's.
CREATE TABLE log_partitions (
  stream      text        NOT NULL,
  partition   int         NOT NULL CHECK (partition >= 0),
  last_offset bigint      NOT NULL DEFAULT 0,
  owner       text,
  epoch       bigint      NOT NULL DEFAULT 0,
  expires_at  timestamptz NOT NULL DEFAULT '-infinity',
  updated_at  timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (stream, partition)
);

-- The persisters alive (each renews its row with its leases): a persister's fair share of
-- the partitions is their count divided by the live members.
CREATE TABLE persister_members (
  stream     text        NOT NULL,
  member     text        NOT NULL,
  started_at timestamptz NOT NULL DEFAULT now(),
  expires_at timestamptz NOT NULL,
  PRIMARY KEY (stream, member)
);
