package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/fleet/fleet/agent/link"
	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/resource"
)

// Claiming (issue 28): a gateway without a device token registers itself
// with a claim token (--claim) and its serial number (--serial) at the
// relay's claim endpoint (protocol.ClaimPath), once, and keeps the device
// token it gets in StateDir/DeviceTokenFile (mode 0600). See docs/agent.md
// "Claiming".

// maxTokenFile bounds what is read of the device token file.
const maxTokenFile = 1 << 10

// SerialFilePrefix in --serial reads the serial number from a file
// (file:/sys/class/dmi/id/product_serial), so that one configuration
// serves a whole batch of gateways.
const SerialFilePrefix = "file:"

// HasStoredToken reports whether stateDir holds a device token from a
// claim.
func HasStoredToken(stateDir string) bool {
	tok, err := StoredToken(stateDir)
	return err == nil && tok != ""
}

// StoredToken returns the device token kept in stateDir ("" when there is
// none).
func StoredToken(stateDir string) (string, error) {
	f, err := os.Open(filepath.Join(stateDir, DeviceTokenFile))
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("device token: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxTokenFile+1))
	if err != nil {
		return "", fmt.Errorf("device token: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if len(b) > maxTokenFile || strings.ContainsAny(tok, " \t\r\n") {
		return "", fmt.Errorf("device token: %s does not hold one token", f.Name())
	}
	return tok, nil
}

// storeToken writes the device token to stateDir/DeviceTokenFile, mode
// 0600, atomically: a temporary file written and synced, renamed over the
// file, the directory synced, so that a power cut leaves either no token
// or the whole one.
func storeToken(stateDir, token string) error {
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return fmt.Errorf("state dir: %w", err)
	}
	tmp, err := os.CreateTemp(stateDir, "."+DeviceTokenFile+"-*")
	if err != nil {
		return fmt.Errorf("device token: %w", err)
	}
	defer os.Remove(tmp.Name()) // after the rename, nothing to remove
	err = tmp.Chmod(0o600)
	if err == nil {
		_, err = tmp.WriteString(token + "\n")
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), filepath.Join(stateDir, DeviceTokenFile))
	}
	if err != nil {
		return fmt.Errorf("device token: %w", err)
	}
	dir, err := os.Open(stateDir)
	if err != nil {
		return fmt.Errorf("device token: %w", err)
	}
	defer dir.Close()
	if err := dir.Sync(); err != nil {
		return fmt.Errorf("device token: sync %s: %w", stateDir, err)
	}
	return nil
}

// serialNumber is --serial, read from its file with SerialFilePrefix
// (whitespace and NUL bytes trimmed: device-tree strings end in one).
func serialNumber(s string) (string, error) {
	path, ok := strings.CutPrefix(s, SerialFilePrefix)
	if !ok {
		return strings.TrimSpace(s), nil
	}
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("--serial: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 256))
	if err != nil {
		return "", fmt.Errorf("--serial: %w", err)
	}
	sn := strings.Trim(string(b), " \t\r\n\x00")
	if sn == "" {
		return "", fmt.Errorf("--serial: %s is empty", path)
	}
	return sn, nil
}

// ExitClaimRefused is fleet-agent's exit status when the relay refused its
// claim for good: the systemd unit does not restart it
// (RestartPreventExitStatus), since the same claim would be refused again.
// It is sysexits' EX_CONFIG (78), not a small number a broken release
// might exit with: a release on trial that exits must be restarted, so
// that the update rolls back (docs/updates.md).
const ExitClaimRefused = 78

// ClaimRefusedError is a claim the relay refused for good (400, 401,
// 409): Message is the relay's, which says why.
type ClaimRefusedError struct {
	Relay   string
	Status  int
	Message string
}

func (e *ClaimRefusedError) Error() string {
	return fmt.Sprintf("the relay %s refused the claim (HTTP %d): %s", e.Relay, e.Status, e.Message)
}

// Provision makes sure cfg holds a device token. --token, when given,
// wins; else the token kept in StateDir is used; else cfg.Claim is
// redeemed for one with cfg.Serial at the relays in turn, with the
// reconnect backoff, until it succeeds (the token is then kept in
// StateDir), the relay refuses it for good (a *ClaimRefusedError), or ctx
// ends. Neither token is ever logged.
func Provision(ctx context.Context, cfg *Config, log *slog.Logger) error {
	if cfg.Token != "" {
		return nil
	}
	tok, err := StoredToken(cfg.StateDir)
	if err != nil {
		return err
	}
	if tok != "" {
		cfg.Token = tok
		return nil
	}
	if cfg.Claim == "" {
		return errors.New("no device token: give --token, or --claim with --serial")
	}
	serial, err := serialNumber(cfg.Serial)
	if err != nil {
		return err
	}
	req := protocol.ClaimRequest{SerialNumber: serial, Model: cfg.Model, Name: cfg.Name, Location: cfg.Location}
	client := &http.Client{Timeout: 30 * time.Second}
	r := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 0x636c61696d))
	for attempt := 0; ; attempt++ {
		relay := cfg.Relays[attempt%len(cfg.Relays)]
		out, retryAfter, err := redeem(ctx, client, relay, cfg.Claim, req)
		if err == nil {
			if err := storeToken(cfg.StateDir, out.Token); err != nil {
				return err
			}
			cfg.Token = out.Token
			log.Info("gateway claimed: its device token is kept in the state directory", "device", out.DeviceID, "serialNumber", serial,
				"file", filepath.Join(cfg.StateDir, DeviceTokenFile))
			return nil
		}
		var refused *ClaimRefusedError
		if errors.As(err, &refused) {
			return err
		}
		wait := max(link.Backoff(attempt, cfg.BackoffMin, cfg.BackoffMax, r), retryAfter)
		log.Warn("claim not redeemed; retrying", "relay", relay, "err", err, "retryIn", wait.Round(time.Millisecond))
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
	}
}

// redeem posts one claim request to relay; a transient failure also says
// how long the relay asked to wait (Retry-After).
func redeem(ctx context.Context, client *http.Client, relay, claim string, req protocol.ClaimRequest) (protocol.ClaimResponse, time.Duration, error) {
	var out protocol.ClaimResponse
	body, err := json.Marshal(req)
	if err != nil {
		return out, 0, err
	}
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, protocol.HTTPBase(relay)+protocol.ClaimPath, bytes.NewReader(body))
	if err != nil {
		return out, 0, err
	}
	hr.Header.Set("Authorization", "Bearer "+claim)
	hr.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(hr)
	if err != nil {
		return out, 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return out, 0, err
	}
	if resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(b, &out); err != nil || out.Token == "" || out.DeviceID == "" {
			return out, 0, fmt.Errorf("the relay's answer holds no device token")
		}
		return out, 0, nil
	}
	var e resource.ErrorBody
	msg := resp.Status
	if json.Unmarshal(b, &e) == nil && e.Error.Message != "" {
		msg = e.Error.Message
	}
	switch resp.StatusCode {
	case http.StatusBadRequest, http.StatusUnauthorized, http.StatusConflict:
		return out, 0, &ClaimRefusedError{Relay: relay, Status: resp.StatusCode, Message: msg}
	}
	var wait time.Duration
	if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s > 0 {
		wait = min(time.Duration(s)*time.Second, 10*time.Minute)
	}
	return out, wait, fmt.Errorf("HTTP %d: %s", resp.StatusCode, msg)
}
