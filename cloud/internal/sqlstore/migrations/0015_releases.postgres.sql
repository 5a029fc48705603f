-- Agent releases (issue 28): a signed fleet-agent binary per organization,
-- version and architecture, stored in the database so that any relay of a
-- cluster serves it (GET /agent/v1/releases/{id}). size and sha256 (hex)
-- are the binary's; signature is its minisign signature file's text.
CREATE TABLE releases (
    id         text PRIMARY KEY,
    org_id     text NOT NULL REFERENCES orgs(id),
    version    text NOT NULL,
    arch       text NOT NULL,
    size       bigint NOT NULL,
    sha256     text NOT NULL,
    signature  text NOT NULL,
    created_at bigint NOT NULL,
    UNIQUE (org_id, version, arch)
);
CREATE INDEX releases_org ON releases(org_id, created_at, id);

-- The binary in chunks of 1 MiB (sqlstore.ReleaseChunk), chunk n holding
-- bytes [n MiB, (n+1) MiB); written in the transaction that adds the
-- release.
CREATE TABLE release_chunks (
    release_id text NOT NULL REFERENCES releases(id) ON DELETE CASCADE,
    n          integer NOT NULL,
    data       bytea NOT NULL,
    PRIMARY KEY (release_id, n)
);
-- Out of line and uncompressed: a binary barely shrinks under pglz, and
-- every download would pay its decompression.
ALTER TABLE release_chunks ALTER COLUMN data SET STORAGE EXTERNAL;
