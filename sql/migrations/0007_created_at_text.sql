-- A producer's own text of created_at (such as Python's isoformat(), with microseconds and an
-- offset), returned exactly as given; created_at keeps the instant it names. NULL when the
-- producer gave none (and for every row stored before), so readers render created_at.
-- Adding a nullable column without a default rewrites no row.
ALTER TABLE run_events ADD COLUMN created_at_text text;
