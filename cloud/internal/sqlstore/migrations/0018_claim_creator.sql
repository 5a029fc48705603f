-- Who created a claim (issue 30): a device claimed by an agent is recorded
-- in the audit log as the act of the claim's creator (the agent has no
-- actor of its own). created_by_kind is the actor's kind (user, api_key,
-- cli; '' for a claim the system made), created_by_id and created_by_name
-- its id and name. Claims made before this step are the CLI's, unknown.
ALTER TABLE claims ADD COLUMN created_by_kind text NOT NULL DEFAULT 'cli';
ALTER TABLE claims ADD COLUMN created_by_id text NOT NULL DEFAULT 'unknown';
ALTER TABLE claims ADD COLUMN created_by_name text NOT NULL DEFAULT 'unknown';
