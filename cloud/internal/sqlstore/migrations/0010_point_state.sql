-- Points (issue 26): the latest state of each point of a channel as the
-- agent's heartbeats report it, kept with the channel's telemetry: a JSON
-- array with one array per point, [name, value, read at (Unix ms),
-- quality, error] (cloud/pointcodec.go), written by a heartbeat only when
-- it changed. NULL: no point reported. One file for both stores.
ALTER TABLE serial_channels ADD COLUMN points text;
