package update

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/jedisct1/go-minisign"

	"github.com/fleet/fleet/shared/protocol"
)

// MaxReleaseBytes bounds a release the agent downloads; it equals the
// relay's cloud.MaxReleaseBytes (the agent does not link cloud/).
const MaxReleaseBytes = 64 << 20

var (
	releaseIDPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)
	sha256Pattern    = regexp.MustCompile(`^[0-9a-fA-F]{64}$`)
)

// permanent marks a download error that a retry cannot cure.
type permanent struct{ error }

func (p permanent) Unwrap() error { return p.error }

// busy is a download the relay refused for now (503: it serves as many as
// it may, or cannot read its store); after is its Retry-After.
type busy struct {
	error
	after time.Duration
}

func (b busy) Unwrap() error { return b.error }

// downloadBusyBudget is how long a download keeps asking a busy relay:
// within the relay's grace for a device's update (cloud.RolloutDownloadGrace,
// 10 minutes, with the health window), so that a wave of thousands of
// gateways queues on the relay's download slots rather than failing.
const downloadBusyBudget = 8 * time.Minute

// busyWait is how long to wait after a busy answer that said after: its
// Retry-After between 1 s and 60 s (5 s when it gave none), spread by up
// to half again so that a wave's refusals do not come back at once.
func busyWait(after time.Duration) time.Duration {
	if after <= 0 {
		after = 5 * time.Second
	}
	after = min(max(after, time.Second), time.Minute)
	return after + rand.N(after/2+1)
}

// checkOrder validates an order before anything is downloaded.
func checkOrder(o *protocol.UpdateOrder) error {
	switch {
	case o == nil:
		return errors.New("update command without an order")
	case !releaseIDPattern.MatchString(o.ReleaseID):
		return fmt.Errorf("release id %q is not valid", o.ReleaseID)
	case o.Version == "":
		return errors.New("the order names no version")
	case !strings.HasPrefix(o.Path, "/"):
		return fmt.Errorf("release path %q is not a path on the relay", o.Path)
	case o.Size <= 0 || o.Size > MaxReleaseBytes:
		return fmt.Errorf("release size %d is out of range (1 to %d bytes)", o.Size, MaxReleaseBytes)
	case !sha256Pattern.MatchString(o.SHA256):
		return fmt.Errorf("release sha256 %q is not a hex SHA-256", o.SHA256)
	case o.Signature == "":
		return errors.New("the release has no signature: unsigned releases are never run")
	case len(o.Signature) > protocol.MaxCommandSignature:
		return fmt.Errorf("the release signature is longer than %d bytes", protocol.MaxCommandSignature)
	}
	if _, err := minisign.DecodeSignature(o.Signature); err != nil {
		return fmt.Errorf("the release signature is not a minisign signature: %w", err)
	}
	return nil
}

// download fetches the release into part, resuming from what part
// holds; it retries a broken transfer a few times (each retry resumes),
// and waits for a busy relay (503, as its Retry-After says) for up to
// downloadBusyBudget without counting those answers as failures.
func (u *Updater) download(ctx context.Context, o *protocol.UpdateOrder, part string) error {
	var err error
	busyUntil := time.Now().Add(downloadBusyBudget)
	for attempt := 1; attempt <= 5; {
		if err = u.fetch(ctx, o, part); err == nil {
			return nil
		}
		var p permanent
		if errors.As(err, &p) {
			return err
		}
		var b busy
		if errors.As(err, &b) && time.Now().Before(busyUntil) {
			wait := busyWait(b.after)
			u.o.Log.Info("relay busy; download waits", "release", o.ReleaseID, "wait", wait)
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(wait):
			}
			continue
		}
		attempt++
		u.o.Log.Warn("release download interrupted; resuming", "release", o.ReleaseID, "attempt", attempt, "err", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Duration(attempt) * time.Second):
		}
	}
	return err
}

// fetch makes one GET of the release, with Range from part's size when it
// holds a beginning already, and appends to part (or starts over when the
// relay ignores the range). It reads at most o.Size bytes in all.
func (u *Updater) fetch(ctx context.Context, o *protocol.UpdateOrder, part string) error {
	f, err := os.OpenFile(part, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return permanent{fmt.Errorf("download: %w", err)}
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return permanent{err}
	}
	have := st.Size()
	if have > o.Size {
		if err := f.Truncate(0); err != nil {
			return permanent{err}
		}
		have = 0
	}
	if have == o.Size {
		return nil
	}
	// A transfer that stalls (no byte for downloadIdle) is cut and resumed.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	idle := time.AfterFunc(downloadIdle, cancel)
	defer idle.Stop()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, protocol.HTTPBase(u.o.Relay())+o.Path, nil)
	if err != nil {
		return permanent{fmt.Errorf("download: %w", err)}
	}
	req.Header.Set("Authorization", "Bearer "+u.o.Token())
	if have > 0 {
		req.Header.Set("Range", fmt.Sprintf("bytes=%d-", have))
	}
	res, err := u.o.Client.Do(req)
	if err != nil {
		return fmt.Errorf("download: %w", err)
	}
	defer res.Body.Close()
	switch res.StatusCode {
	case http.StatusPartialContent:
		if !strings.HasPrefix(res.Header.Get("Content-Range"), "bytes "+strconv.FormatInt(have, 10)+"-") {
			have = 0 // not the range asked: start over
			if err := f.Truncate(0); err != nil {
				return permanent{err}
			}
			return errors.New("download: the relay answered another range; starting over")
		}
	case http.StatusOK:
		have = 0
		if err := f.Truncate(0); err != nil {
			return permanent{err}
		}
	case http.StatusRequestedRangeNotSatisfiable:
		if err := f.Truncate(0); err != nil {
			return permanent{err}
		}
		return errors.New("download: the relay refused the range; starting over")
	case http.StatusUnauthorized, http.StatusForbidden, http.StatusNotFound:
		return permanent{fmt.Errorf("download %s: %s", o.Path, res.Status)}
	case http.StatusServiceUnavailable, http.StatusTooManyRequests:
		secs, _ := strconv.Atoi(res.Header.Get("Retry-After"))
		return busy{fmt.Errorf("download %s: %s", o.Path, res.Status), time.Duration(secs) * time.Second}
	default:
		return fmt.Errorf("download %s: %s", o.Path, res.Status)
	}
	if _, err := f.Seek(have, io.SeekStart); err != nil {
		return permanent{err}
	}
	n, err := io.Copy(f, io.LimitReader(progress{res.Body, func() { idle.Reset(downloadIdle) }}, o.Size-have+1))
	if serr := f.Sync(); err == nil {
		err = serr
	}
	switch {
	case have+n > o.Size:
		f.Truncate(0)
		return permanent{fmt.Errorf("download: the release is larger than its announced %d bytes", o.Size)}
	case err != nil:
		return fmt.Errorf("download: %w", err)
	case have+n < o.Size:
		return fmt.Errorf("download: %d of %d bytes", have+n, o.Size)
	}
	return nil
}

// downloadIdle is how long a download may go without a byte.
const downloadIdle = time.Minute

// progress calls moved after each read that moved bytes.
type progress struct {
	r     io.Reader
	moved func()
}

func (p progress) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	if n > 0 {
		p.moved()
	}
	return n, err
}

// verify checks the downloaded release: its SHA-256 and its minisign
// signature against the update key. The file is at most MaxReleaseBytes.
func (u *Updater) verify(o *protocol.UpdateOrder, part string) error {
	b, err := os.ReadFile(part)
	if err != nil {
		return err
	}
	if int64(len(b)) != o.Size {
		return fmt.Errorf("the release has %d bytes, the order says %d", len(b), o.Size)
	}
	sum := sha256.Sum256(b)
	if got := hex.EncodeToString(sum[:]); !strings.EqualFold(got, o.SHA256) {
		return fmt.Errorf("the release's SHA-256 is %s, the order says %s", got, o.SHA256)
	}
	key, err := minisign.NewPublicKeyFromFile(u.o.KeyFile)
	if err != nil {
		return fmt.Errorf("update key %s: %w", u.o.KeyFile, err)
	}
	sig, err := minisign.DecodeSignature(o.Signature)
	if err != nil {
		return fmt.Errorf("the release signature: %w", err)
	}
	if ok, err := key.Verify(b, sig); !ok {
		return fmt.Errorf("the release signature does not verify against the update key %s: %w", u.o.KeyFile, err)
	}
	return nil
}
