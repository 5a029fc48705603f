-- Claims (issue 28): a claim token registers gateways without a console.
-- Only the token's SHA-256 is kept. A claim creates at most `uses` devices
-- (used counts them), until expires_at (NULL: never) or its revocation.
-- claimed_devices remembers the device each serial number got through a
-- claim, so that the same serial claimed again through it is the same
-- device (a fresh token, no use counted). Unix milliseconds.
CREATE TABLE claims (
    id         text PRIMARY KEY,
    org_id     text NOT NULL REFERENCES orgs(id),
    token_hash bytea NOT NULL UNIQUE,
    model      text NOT NULL,
    tags       text NOT NULL DEFAULT '[]',
    uses       integer NOT NULL,
    used       integer NOT NULL DEFAULT 0,
    expires_at bigint,
    revoked_at bigint,
    created_at bigint NOT NULL
);
CREATE INDEX claims_org_created ON claims(org_id, created_at, id);

CREATE TABLE claimed_devices (
    claim_id      text NOT NULL REFERENCES claims(id),
    serial_number text NOT NULL,
    device_id     text NOT NULL REFERENCES devices(id),
    claimed_at    bigint NOT NULL,
    PRIMARY KEY (claim_id, serial_number)
);
