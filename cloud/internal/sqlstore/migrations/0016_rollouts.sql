-- Rollouts and device commands (issue 28). Times are Unix milliseconds.
--
-- devices.agent_arch: the architecture the device's agent announced at its
-- last hello ('' for none, agents from before updates): a rollout picks
-- the release of its version built for it.
ALTER TABLE devices ADD COLUMN agent_arch text NOT NULL DEFAULT '';

-- A rollout of an agent version to the devices of its scope (resolved at
-- creation into rollout_devices) in cumulative waves (JSON array of
-- percents, the last 100). state: running, paused, completed, stopped,
-- canceled; wave: the index of the wave started last (-1 before the
-- first); reason: why a stopped rollout stopped.
CREATE TABLE rollouts (
    id            text PRIMARY KEY,
    org_id        text NOT NULL REFERENCES orgs(id),
    version       text NOT NULL,
    scope         text NOT NULL,
    waves         text NOT NULL,
    max_failures  bigint NOT NULL,
    health_for_ms bigint NOT NULL,
    state         text NOT NULL,
    wave          bigint NOT NULL DEFAULT -1,
    reason        text,
    created_at    bigint NOT NULL,
    updated_at    bigint NOT NULL
);
CREATE INDEX rollouts_org_created ON rollouts(org_id, created_at, id);
-- The engine's step reads the running rollouts.
CREATE INDEX rollouts_running ON rollouts(id) WHERE state = 'running';

-- Each device's part in a rollout: its wave, its state (pending,
-- downloading, installing, healthy, failed, rolled_back, skipped), the
-- agent version it ran when its wave started, the update command it was
-- sent and when (NULL before its wave), and why it failed.
CREATE TABLE rollout_devices (
    rollout_id   text NOT NULL REFERENCES rollouts(id),
    device_id    text NOT NULL REFERENCES devices(id),
    wave         bigint NOT NULL,
    state        text NOT NULL DEFAULT 'pending',
    from_version text NOT NULL DEFAULT '',
    command_id   text,
    sent_at      bigint,
    error        text,
    updated_at   bigint NOT NULL,
    PRIMARY KEY (rollout_id, device_id)
);
CREATE INDEX rollout_devices_wave ON rollout_devices(rollout_id, wave);
-- The engine's step reads the devices sent an update and not done yet, by
-- when they were sent (timeouts).
CREATE INDEX rollout_devices_inflight ON rollout_devices(sent_at)
    WHERE sent_at IS NOT NULL AND state IN ('pending', 'downloading', 'installing');

-- Commands to devices (reboot, update), sent to the agent after every
-- welcome and when added, until finished. state: queued (not reported
-- yet), then what the agent reports (accepted, downloading, installing,
-- healthy, failed, rolled_back, rebooting), or expired (a reboot not
-- taken within cloud.RebootExpiry) or canceled (its rollout canceled
-- before the agent took it). payload: the update order (JSON) of an
-- update.
CREATE TABLE device_commands (
    id         text PRIMARY KEY,
    org_id     text NOT NULL REFERENCES orgs(id),
    device_id  text NOT NULL REFERENCES devices(id),
    kind       text NOT NULL,
    rollout_id text REFERENCES rollouts(id),
    payload    text,
    state      text NOT NULL DEFAULT 'queued',
    error      text,
    created_at bigint NOT NULL,
    updated_at bigint NOT NULL
);
-- A device's unfinished commands, oldest first (sent after every welcome).
CREATE INDEX device_commands_open ON device_commands(device_id, created_at, id)
    WHERE state IN ('queued', 'accepted', 'downloading', 'installing');
-- Reboots waiting for their agent, by age (expiry).
CREATE INDEX device_commands_reboot_open ON device_commands(created_at)
    WHERE kind = 'reboot' AND state IN ('queued', 'accepted');
