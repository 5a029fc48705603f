-- Points (issue 26): the latest state of each point of a channel as the
-- agent's heartbeats report it, kept with the channel's telemetry: a JSON
-- array of {"n": name, "v": value, "q": quality, "e": error, "t": read at
-- (Unix ms)}, written by the heartbeat only when it changed. NULL: no point
-- reported. One file for both stores.
ALTER TABLE serial_channels ADD COLUMN points text;
