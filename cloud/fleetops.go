package cloud

import (
	"context"
	"io"
	"time"

	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/resource"
)

// Fleet operations (issue 28): claims (zero-touch provisioning), agent
// releases, rollouts and device commands (reboot, update). DESIGN.md
// "Fleet operations: tags, claiming, agent updates".

// ClaimTokenPrefix starts every claim token ("fleet_ct_" and 32 random
// bytes in base32); only its SHA-256 is stored.
const ClaimTokenPrefix = "fleet_ct_"

// Claim is a claim as the CLI and the panel list it (never its token).
type Claim struct {
	ID        string
	OrgID     string
	Model     string
	Tags      []string
	Uses      int // how many devices it may create (1..100000)
	Used      int // how many it created
	ExpiresAt *time.Time
	RevokedAt *time.Time
	CreatedAt time.Time
}

// State is "active", "used_up", "expired" or "revoked" at now.
func (c Claim) State(now time.Time) string {
	switch {
	case c.RevokedAt != nil:
		return "revoked"
	case c.ExpiresAt != nil && !now.Before(*c.ExpiresAt):
		return "expired"
	case c.Used >= c.Uses:
		return "used_up"
	}
	return "active"
}

// NewClaim is what ClaimService.CreateClaim needs: ExpiresIn 0 never
// expires; Uses 0 is 1.
type NewClaim struct {
	OrgID     string
	Model     string
	Tags      []string
	Uses      int
	ExpiresIn time.Duration
}

// ClaimRedeem is an agent's claim: the token and what the agent says of
// itself. IP is the agent's address ("" when unknown), the ip of the
// device.claimed audit record.
type ClaimRedeem struct {
	Token string
	protocol.ClaimRequest
	At time.Time
	IP string
}

// ClaimService holds claims. RedeemClaim is the agent endpoint's (the
// token names the organization); the others are scoped to orgID.
type ClaimService interface {
	// CreateClaim makes a claim and returns it with its token (shown once).
	CreateClaim(ctx context.Context, nc NewClaim) (Claim, string, error)
	ListClaims(ctx context.Context, orgID string) ([]Claim, error)
	// RevokeClaim revokes a claim (idempotent); ENOTFOUND for another
	// organization's.
	RevokeClaim(ctx context.Context, orgID, id string) (Claim, error)
	// RedeemClaim creates the device of in.SerialNumber in the claim's
	// organization (the claim's model and tags, PROVISIONING, event
	// device.claimed) and returns it with a fresh device token, in one
	// transaction. The same serial claimed again through the same claim is
	// the same device: a fresh token (the previous one revoked), no use
	// counted. An unknown, revoked, expired or used-up claim is
	// EUNAUTHORIZED with a message saying which, and creates nothing; a
	// serial already registered otherwise is ECONFLICT; a model other
	// than the claim's is EINVALID.
	RedeemClaim(ctx context.Context, in ClaimRedeem) (protocol.ClaimResponse, error)
}

// Release architectures.
var ReleaseArchs = []string{"amd64", "arm64", "armv7"}

// MaxReleaseBytes bounds a release binary.
const MaxReleaseBytes = 64 << 20

// Release is a stored agent binary.
type Release struct {
	ID        string
	OrgID     string
	Version   string
	Arch      string
	Size      int64
	SHA256    string // hex
	Signature string // the .minisig text
	CreatedAt time.Time
}

// NewRelease is what ReleaseService.AddRelease needs besides the binary.
type NewRelease struct {
	OrgID     string
	Version   string
	Arch      string
	Signature string
}

// ReleaseService holds releases, the binary in chunks in the store so that
// any relay of a cluster serves it.
type ReleaseService interface {
	// AddRelease stores the binary read from body (at most
	// MaxReleaseBytes; EINVALID beyond, or for an empty one, a bad arch or
	// version, a signature that does not parse as minisign's); a version
	// and arch already stored is ECONFLICT.
	AddRelease(ctx context.Context, nr NewRelease, body io.Reader) (Release, error)
	ListReleases(ctx context.Context, orgID string) ([]Release, error)
	Release(ctx context.Context, orgID, id string) (Release, error)
	// ReadRelease reads len(p) bytes or fewer of release id's binary at off
	// (io.ReaderAt semantics); ENOTFOUND for another organization's.
	ReadRelease(ctx context.Context, orgID, id string, p []byte, off int64) (int, error)
}

// RebootAccepted answers POST /devices/{id}/reboot (202).
type RebootAccepted struct {
	CommandID string `json:"commandId"`
	DeviceID  string `json:"deviceId"`
}

// RolloutService is the public API's rollouts and the reboot command,
// scoped to orgID.
type RolloutService interface {
	// CreateRollout checks nr (EINVALID naming the field: version with no
	// release, waves not increasing to 100, healthFor out of range, an
	// unknown device, an empty scope) and stores it running; its first
	// wave starts at the engine's next step.
	CreateRollout(ctx context.Context, orgID string, nr resource.NewRollout) (resource.RolloutDetail, error)
	ListRollouts(ctx context.Context, orgID string, p Page) (resource.List[resource.Rollout], error)
	Rollout(ctx context.Context, orgID, id string) (resource.RolloutDetail, error)
	// ActRollout pauses, resumes or cancels ("pause", "resume",
	// "cancel"); ECONFLICT from a state that does not allow it.
	ActRollout(ctx context.Context, orgID, id, action string) (resource.RolloutDetail, error)
	// RebootDevice queues a reboot command for the device and tells the
	// observer. A reboot already queued and not finished is answered
	// again (same command id). A device that is not connected (status
	// other than ONLINE or ERROR) is ECONFLICT: a reboot is never left
	// waiting to surprise a device days later; an unanswered reboot
	// command expires after RebootExpiry.
	RebootDevice(ctx context.Context, orgID, deviceID string) (RebootAccepted, error)
}

// RebootExpiry is how long a reboot command waits for its agent.
const RebootExpiry = 5 * time.Minute

// CommandsObserver hears that a device has new commands (the agent
// endpoint sends them to the agent it holds).
type CommandsObserver interface {
	CommandsChanged(deviceID string)
}

// CommandStore is the agent endpoint's and the rollout engine's store of
// device commands (Stores.Commands).
type CommandStore interface {
	// PendingCommands returns the device's commands that are not finished,
	// oldest first (sent after every welcome and on CommandsChanged).
	PendingCommands(ctx context.Context, dev AgentDevice) ([]protocol.Command, error)
	// CommandStatus stores an agent's report on one of its commands (an
	// unknown id or another device's is ignored) and the rollout device's
	// state with it; it sets the device's status (UPDATING while an update
	// runs, REBOOTING on rebooting) in the same transaction.
	CommandStatus(ctx context.Context, dev AgentDevice, st protocol.CommandStatus, at time.Time) error
	// AdvanceRollouts is one step of the rollout engine at now, for every
	// organization: a device that took longer than its health window plus
	// DownloadGrace becomes failed; a rollout whose failures exceed
	// maxFailures stops; a running rollout whose current wave is all
	// healthy (or failed within maxFailures) starts its next wave (update
	// commands for its devices) or completes. It returns the devices given
	// new commands; on a cluster it runs under the rollouts lease.
	AdvanceRollouts(ctx context.Context, now time.Time) ([]string, error)
}

// RolloutDownloadGrace is what AdvanceRollouts allows a device beyond its
// health window to download, install and connect before it counts it
// failed.
const RolloutDownloadGrace = 10 * time.Minute
