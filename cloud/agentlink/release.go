package agentlink

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/shared/protocol"
)

// Release downloads (issue 28): GET protocol.ReleasePath(id) serves a
// release's binary to an agent whose device token is the bearer token,
// when the release belongs to the device's organization (404 otherwise,
// as for an unknown id). The body is read from the store chunk by chunk
// (any relay of a cluster serves any release) through http.ServeContent:
// Range requests resume a download cut short, the ETag is the binary's
// SHA-256 so that If-Range holds a resumed download to the same binary,
// and X-Checksum-Sha256 names the SHA-256 too.

// ReleaseConfig configures Server.ReleaseHandler; zero values take the
// defaults.
type ReleaseConfig struct {
	Releases cloud.ReleaseService
	// MaxDownloads bounds the downloads the relay serves at once
	// (DefaultMaxDownloads); one more is answered 503 with Retry-After.
	MaxDownloads int
	// WriteIdle bounds each write of the body to the agent
	// (DefaultDownloadWriteIdle): the relay's server-wide write timeout,
	// which a 64 MiB body on a slow link would overrun, does not apply
	// to a download; a write that makes no progress for WriteIdle does.
	WriteIdle time.Duration
	// MaxDuration bounds a whole download (DefaultDownloadMax); the agent
	// resumes the rest with Range.
	MaxDuration time.Duration
}

// The defaults of ReleaseConfig.
const (
	DefaultMaxDownloads      = 64
	DefaultDownloadWriteIdle = time.Minute
	// DefaultDownloadMax lets cloud.MaxReleaseBytes through at 75 kbit/s.
	DefaultDownloadMax = 2 * time.Hour
)

// downloadRetryAfter is the Retry-After (seconds) of a download refused
// because the relay serves MaxDownloads already: about how long one takes
// on a busy relay (12 MiB at 64 at once measured 3 to 6 s), so slots freed
// are taken again soon. The agent spreads its wait by up to half again
// and keeps asking for minutes (agent/update).
const downloadRetryAfter = 5

// ReleaseHandler returns the release download endpoint, to be mounted at
// protocol.ReleasePath("{id}"). It authenticates agents as the websocket
// endpoint does (same refusal budget per address).
func (s *Server) ReleaseHandler(cfg ReleaseConfig) http.Handler {
	if cfg.Releases == nil {
		panic("agentlink: ReleaseConfig.Releases is required")
	}
	if cfg.MaxDownloads <= 0 {
		cfg.MaxDownloads = DefaultMaxDownloads
	}
	if cfg.WriteIdle <= 0 {
		cfg.WriteIdle = DefaultDownloadWriteIdle
	}
	if cfg.MaxDuration <= 0 {
		cfg.MaxDuration = DefaultDownloadMax
	}
	return &downloads{srv: s, cfg: cfg, slots: make(chan struct{}, cfg.MaxDownloads)}
}

// downloads serves release binaries, at most cap(slots) at once.
type downloads struct {
	srv   *Server
	cfg   ReleaseConfig
	slots chan struct{}
}

func (d *downloads) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		writeError(w, http.StatusMethodNotAllowed, "method_not_allowed", "a release is downloaded with GET")
		return
	}
	dev, ok := d.srv.authenticate(w, r)
	if !ok {
		return
	}
	id, _ := strings.CutPrefix(r.URL.Path, protocol.ReleasePath(""))
	rel, err := d.cfg.Releases.Release(r.Context(), dev.OrgID, id)
	if err != nil {
		d.storeError(w, r, dev, err)
		return
	}
	select {
	case d.slots <- struct{}{}:
		defer func() { <-d.slots }()
	default:
		w.Header().Set("Retry-After", strconv.Itoa(downloadRetryAfter))
		writeError(w, http.StatusServiceUnavailable, "busy", "the relay serves as many downloads as it may; retry later")
		return
	}
	end := time.Now().Add(d.cfg.MaxDuration)
	ctx, cancel := context.WithDeadline(r.Context(), end)
	defer cancel()
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("ETag", `"`+rel.SHA256+`"`)
	h.Set("X-Checksum-Sha256", rel.SHA256)
	h.Set("Cache-Control", "private, no-transform")
	src := &storeReader{ctx: ctx, releases: d.cfg.Releases, orgID: dev.OrgID, id: rel.ID}
	body := io.NewSectionReader(newChunkCache(src, rel.Size, cloud.ReleaseChunkBytes), 0, rel.Size)
	out := &deadlineWriter{ResponseWriter: w, rc: http.NewResponseController(w), idle: d.cfg.WriteIdle, end: end}
	start := time.Now()
	http.ServeContent(out, r, "", rel.CreatedAt, body)
	log := d.srv.log.With("device", dev.ID, "release", rel.ID, "version", rel.Version, "range", r.Header.Get("Range") != "",
		"bytes", out.n, "duration_ms", time.Since(start).Milliseconds())
	switch {
	case src.err != nil:
		log.Warn("release download cut short: store read failed", "err", src.err)
	case out.err != nil:
		log.Info("release download cut short", "err", out.err)
	default:
		log.Info("release downloaded")
	}
}

// storeError answers a failed release lookup: 404 for a release that is
// not the device's organization's, 503 when the store cannot tell.
func (d *downloads) storeError(w http.ResponseWriter, r *http.Request, dev Device, err error) {
	switch cloud.ErrorCode(err) {
	case cloud.ENOTFOUND:
		writeError(w, http.StatusNotFound, cloud.ENOTFOUND, "release not found")
	default:
		d.srv.log.Error("release download refused: store unavailable", "device", dev.ID, "path", r.URL.Path, "err", err)
		w.Header().Set("Retry-After", strconv.Itoa(downloadRetryAfter))
		writeError(w, http.StatusServiceUnavailable, cloud.ESERVICEUNAVAILABLE, "the relay cannot read the release now; retry later")
	}
}

// storeReader reads a release through ReleaseService.ReadRelease and
// keeps its first error other than io.EOF.
type storeReader struct {
	ctx       context.Context
	releases  cloud.ReleaseService
	orgID, id string
	err       error
}

func (s *storeReader) ReadAt(p []byte, off int64) (int, error) {
	n, err := s.releases.ReadRelease(s.ctx, s.orgID, s.id, p, off)
	if err != nil && err != io.EOF && s.err == nil {
		s.err = err
	}
	return n, err
}

// deadlineWriter is the response of a download: before each write it moves
// the connection's write deadline to idle from now, but not past end.
type deadlineWriter struct {
	http.ResponseWriter
	rc   *http.ResponseController
	idle time.Duration
	end  time.Time
	n    int64 // bytes of the body written
	err  error // the first write's error
}

func (w *deadlineWriter) Write(p []byte) (int, error) {
	dl := time.Now().Add(w.idle)
	if dl.After(w.end) {
		dl = w.end
	}
	// A connection that cannot take a deadline (none in the relay) keeps
	// the server's.
	_ = w.rc.SetWriteDeadline(dl)
	n, err := w.ResponseWriter.Write(p)
	w.n += int64(n)
	if err != nil && w.err == nil {
		w.err = err
	}
	return n, err
}

// Unwrap returns the response writer (http.ResponseController).
func (w *deadlineWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
