-- When the relay opened the connection that holds a device's agent
-- session (unix ms, the relay's clock). A connection attempt whose store
-- write lands after a newer attempt's (a slow store, an agent that gave up
-- and dialled again) is refused instead of taking the device from the
-- newer, already welcomed connection (issue 31's 50,000-agent guest run).
ALTER TABLE devices ADD COLUMN agent_session_at bigint;
