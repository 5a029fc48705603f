-- Agent releases (issue 28): a signed fleet-agent binary per organization,
-- version and architecture, stored in the database so that any relay of a
-- cluster serves it (GET /agent/v1/releases/{id}). size and sha256 (hex)
-- are the binary's; signature is its minisign signature file's text.
CREATE TABLE releases (
    id         TEXT PRIMARY KEY,
    org_id     TEXT NOT NULL REFERENCES orgs(id),
    version    TEXT NOT NULL,
    arch       TEXT NOT NULL,
    size       INTEGER NOT NULL,
    sha256     TEXT NOT NULL,
    signature  TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    UNIQUE (org_id, version, arch)
);
CREATE INDEX releases_org ON releases(org_id, created_at, id);

-- The binary in chunks of 1 MiB (sqlstore.ReleaseChunk), chunk n holding
-- bytes [n MiB, (n+1) MiB); written in the transaction that adds the
-- release.
CREATE TABLE release_chunks (
    release_id TEXT NOT NULL REFERENCES releases(id) ON DELETE CASCADE,
    n          INTEGER NOT NULL,
    data       BLOB NOT NULL,
    PRIMARY KEY (release_id, n)
);
