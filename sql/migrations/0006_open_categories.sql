-- An open category set. The three known categories keep their numbers (1 message, 2 trace,
-- 3 lifecycle) and their rows are unchanged; any other category is stored as 0 with its name
-- in category_name (a lower-case identifier, checked at ingest: src/domain/event.ts).
-- Adding a nullable column without a default rewrites no row.
ALTER TABLE run_events ADD COLUMN category_name text;
ALTER TABLE run_events DROP CONSTRAINT run_events_category_check;
-- NOT VALID: the rows already there hold 1-3 and NULL names, which the check accepts; new
-- rows are checked all the same.
ALTER TABLE run_events ADD CONSTRAINT run_events_category_check
  CHECK (CASE WHEN category = 0 THEN category_name IS NOT NULL
              ELSE category BETWEEN 1 AND 3 AND category_name IS NULL END) NOT VALID;

ALTER TABLE dead_letters ADD COLUMN category_name text;
