-- Single sign-on (issue 30): an organization's OpenID Connect provider and
-- the email domains whose people sign in through it. client_secret is sent
-- to the provider only, never shown back; role_map is a JSON object of
-- claim value to role; enabled is 0 or 1; updated_at is Unix milliseconds.
CREATE TABLE org_oidc (
    org_id        text PRIMARY KEY REFERENCES orgs(id),
    issuer        text NOT NULL,
    client_id     text NOT NULL,
    client_secret text NOT NULL,
    default_role  text NOT NULL,
    role_claim    text NOT NULL,
    role_map      text NOT NULL,
    enabled       integer NOT NULL,
    updated_at    bigint NOT NULL
);
-- A domain belongs to one organization: the sign-in page routes an email
-- by its domain.
CREATE TABLE oidc_domains (
    domain text PRIMARY KEY,
    org_id text NOT NULL REFERENCES orgs(id)
);
CREATE INDEX oidc_domains_org ON oidc_domains(org_id);
