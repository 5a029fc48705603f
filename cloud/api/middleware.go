package api

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/go-chi/chi/v5"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/internal/clientaddr"
)

// Rate-limit response headers (rateLimit): the X- trio is the de facto
// convention (X-RateLimit-Reset in Unix seconds); RateLimit and
// RateLimit-Policy follow draft-ietf-httpapi-ratelimit-headers-10/11
// (structured fields: `"default";q=600;w=60` and `"default";r=599;t=42`, t
// in seconds).
const hdrRequestID = "X-Request-Id"

// reqInfo is what the middleware learns about one request; handlers and the
// access log reach it through the request's ResponseWriter (record), which
// costs no context value and no copy of the request.
type reqInfo struct {
	id        string
	idHeader  [1]string // X-Request-Id's value: the header map holds a slice of it
	key       *cloud.APIKey
	authErr   error
	needScope string
	wrote     bool
	status    int
	bytes     int64
	remote    string // clientAddr, computed once
	version   requestVersion
}

// infoFrom returns the request's reqInfo from its ResponseWriter, or nil
// when w is not the server's (a handler called outside ServeHTTP).
func infoFrom(w http.ResponseWriter) *reqInfo {
	if rec, ok := w.(*record); ok {
		return &rec.info
	}
	return nil
}

func requestID(info *reqInfo) string {
	if info == nil {
		return ""
	}
	return info.id
}

// record is the ResponseWriter of a request: it remembers the status and
// size for the access log. It carries the reqInfo so that one allocation
// serves both.
type record struct {
	http.ResponseWriter
	info reqInfo
}

func (rw *record) WriteHeader(code int) {
	if !rw.info.wrote {
		rw.info.wrote = true
		rw.info.status = code
	}
	rw.ResponseWriter.WriteHeader(code)
}

func (rw *record) Write(b []byte) (int, error) {
	if !rw.info.wrote {
		rw.info.wrote = true
		rw.info.status = http.StatusOK
	}
	n, err := rw.ResponseWriter.Write(b)
	rw.info.bytes += int64(n)
	return n, err
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (rw *record) Unwrap() http.ResponseWriter { return rw.ResponseWriter }

// validRequestID reports whether an incoming X-Request-Id is safe to adopt
// and echo: 1..128 characters of [A-Za-z0-9._:-].
func validRequestID(s string) bool {
	if len(s) == 0 || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.' || c == ':') {
			return false
		}
	}
	return true
}

// recordRequest assigns the request id, echoes it, and writes one access-log
// line per request: method, path (never the query), status, duration, bytes,
// request id, key id and client address. Never the Authorization header.
// Requests refused 401 or 429 without a verified key are logged in summary
// instead (refusallog): the first of each of the first few addresses in a
// minute, then one line with the counts.
func (s *Server) recordRequest(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &record{ResponseWriter: w}
		if id := r.Header.Get(hdrRequestID); validRequestID(id) {
			rec.info.id = id
		} else {
			rec.info.id = s.nextRequestID()
		}
		rec.info.idHeader[0] = rec.info.id
		w.Header()[hdrRequestID] = rec.info.idHeader[:]
		next.ServeHTTP(rec, r)
		ctx := r.Context()
		status := rec.info.status
		if !rec.info.wrote {
			status = http.StatusOK
		}
		took := time.Since(start) // one clock read for the metrics and the log
		if s.cfg.Requests != nil {
			s.cfg.Requests.ObserveRequest(s.routeLabels.of(chi.RouteContext(ctx)), r.Method, status, took)
		}
		if !s.access.Enabled(ctx, slog.LevelInfo) {
			return
		}
		if rec.info.key == nil && (status == http.StatusUnauthorized || status == http.StatusTooManyRequests) {
			// Refused before a key was known: in summary, not a line
			// each (a flood would fill the disk).
			reason := "unauthorized"
			if status == http.StatusTooManyRequests {
				reason = "rate_limited"
			}
			s.refused.Note(rec.info.clientAddr(r), reason)
			return
		}
		keyID := ""
		if rec.info.key != nil {
			keyID = rec.info.key.ID
		}
		if w := s.cfg.AccessLogTo; w != nil {
			line := accessLines.Get().(*[]byte)
			*line = appendAccessLine((*line)[:0], start.Add(took), rec.info.id, r.Method, safePath(r.URL.Path), status, took, rec.info.bytes, keyID, rec.info.clientAddr(r))
			w.Write(*line)
			if cap(*line) <= 4<<10 {
				accessLines.Put(line)
			}
			return
		}
		s.access.LogAttrs(ctx, slog.LevelInfo, "request",
			slog.String("request_id", rec.info.id),
			slog.String("method", r.Method),
			slog.String("path", safePath(r.URL.Path)),
			slog.Int("status", status),
			slog.Float64("duration_ms", float64(took.Microseconds())/1000),
			slog.Int64("bytes", rec.info.bytes),
			slog.String("key_id", keyID),
			slog.String("remote", rec.info.clientAddr(r)),
		)
	})
}

// recoverPanic turns a panic into 500 internal_error (when nothing was sent
// yet) and logs it with its stack; the process keeps serving.
func (s *Server) recoverPanic(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			v := recover()
			if v == nil {
				return
			}
			if v == http.ErrAbortHandler {
				panic(v)
			}
			info := infoFrom(w)
			s.log.LogAttrs(r.Context(), slog.LevelError, "panic",
				slog.String("request_id", requestID(info)),
				slog.String("path", safePath(r.URL.Path)),
				slog.String("panic", fmt.Sprint(v)),
				slog.String("stack", string(debug.Stack())))
			if info != nil && info.wrote {
				return
			}
			s.writeError(w, r, errors.New("panic in handler"))
		}()
		next.ServeHTTP(w, r)
	})
}

// clientAddr is the rate-limit identity of an unauthenticated request
// (clientaddr.Key), computed once per request.
func (info *reqInfo) clientAddr(r *http.Request) string {
	if info.remote == "" {
		info.remote = clientaddr.Key(r)
	}
	return info.remote
}

// bearerToken returns the token of an "Authorization: Bearer <token>"
// header. The scheme is case-insensitive; the token is bounded and printable.
func bearerToken(h string) (string, bool) {
	const scheme = "bearer "
	if len(h) <= len(scheme) || !strings.EqualFold(h[:len(scheme)], scheme) {
		return "", false
	}
	tok := strings.TrimLeft(h[len(scheme):], " ")
	if tok == "" || len(tok) > 512 {
		return "", false
	}
	for i := 0; i < len(tok); i++ {
		if tok[i] <= ' ' || tok[i] >= 0x7f {
			return "", false
		}
	}
	return tok, true
}

// rateLimit authenticates the request (when it carries a key) and charges
// it to the key's budget, or to the client address when it does not
// authenticate. A key not verified here before is charged to the address
// before it is verified, so an address over its budget spends no bcrypt;
// the first request of a good key costs its address one request too. Every
// response below it carries the rate-limit headers; an exhausted budget
// answers 429 rate_limited with Retry-After. The authentication result is
// kept for the scope check of the endpoint, so that unknown routes, 405s
// and the OpenAPI document need no key.
func (s *Server) rateLimit(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" || r.URL.Path == "/readyz" {
			next.ServeHTTP(w, r)
			return
		}
		info := infoFrom(w)
		authz := r.Header.Get("Authorization")
		sum, keyBucket, known := s.knownKey(authz)
		now := time.Now() // the limiter runs on the wall clock
		var rc rateCharge
		var err error
		if !known {
			rc, err = s.limiter.charge(addrBucket(info, r), now)
		}
		if rc.limited {
			// This address has used up its budget of unauthenticated
			// requests: do not spend bcrypt on keys never verified here.
			info.authErr = cloud.Errorf(cloud.EUNAUTHORIZED, "missing or invalid API key")
		} else if err == nil {
			s.authenticate(r, info)
			if info.key != nil && (!known || keyBucket[len("k:"):] != info.key.ID) {
				keyBucket = "k:" + info.key.ID
				s.rememberKey(sum, keyBucket)
			}
			switch {
			case info.key != nil:
				rc, err = s.limiter.charge(keyBucket, now)
			case known: // verified before, refused now (revoked, expired)
				rc, err = s.limiter.charge(addrBucket(info, r), now)
			}
		}
		if err != nil {
			// The counter failed (cloud/redis falls back to this
			// relay's counts and does not): the budget is unknown.
			s.writeError(w, r, fmt.Errorf("rate limit counter: %w", err))
			return
		}
		secs := max(0, rc.reset-now.Unix())
		remaining := strconv.Itoa(rc.remaining)
		// The names in their documented spelling (HTTP/1.1 names are
		// case-insensitive, but people grep curl output): a header map's
		// keys are written as they are.
		h := w.Header()
		h["X-RateLimit-Limit"] = s.hdrLimit
		h["X-RateLimit-Remaining"] = []string{remaining}
		h["X-RateLimit-Reset"] = []string{strconv.FormatInt(rc.reset, 10)}
		h["RateLimit-Policy"] = s.policy
		h["RateLimit"] = []string{`"default";r=` + remaining + `;t=` + strconv.FormatInt(secs, 10)}
		if rc.limited {
			// The limiter's window slides: the budget comes back
			// gradually after the reset. One request's worth of window
			// after the reset is when the next request fits again.
			wait := secs + int64((s.window+time.Duration(s.limit)-1)/time.Duration(s.limit)/time.Second) + 1
			h.Set("Retry-After", strconv.FormatInt(wait, 10))
			s.writeError(w, r, cloud.Errorf(codeRateLimited, "rate limit of %d requests per minute exceeded; retry after %d seconds", s.limit, wait))
			return
		}
		if info.key != nil && r.Method != http.MethodGet && r.Method != http.MethodHead {
			// A change is the key's: the store writes its audit record
			// (cloud/audit.go). Reads carry no actor and cost nothing.
			r = r.WithContext(cloud.WithActor(r.Context(), cloud.Actor{
				Kind: cloud.ActorAPIKey, ID: info.key.ID, Name: info.key.Name, IP: clientaddr.Host(r)}))
		}
		next.ServeHTTP(w, r)
	})
}

func (s *Server) authenticate(r *http.Request, info *reqInfo) {
	h := r.Header.Get("Authorization")
	if h == "" {
		info.authErr = cloud.Errorf(cloud.EUNAUTHORIZED, "missing Authorization header; send Authorization: Bearer <API key>")
		return
	}
	tok, ok := bearerToken(h)
	if !ok {
		info.authErr = cloud.Errorf(cloud.EUNAUTHORIZED, "malformed Authorization header; send Authorization: Bearer <API key>")
		return
	}
	if s.cfg.Auth == nil {
		info.authErr = errors.New("api: no authenticator configured")
		return
	}
	version, versioned := info.version.get(r.Context(), s.cfg.Versioner)
	key, err := s.cfg.Auth.AuthenticateAt(r.Context(), tok, info.clientAddr(r), version, versioned)
	if err != nil {
		info.authErr = err
		return
	}
	if key == nil {
		info.authErr = cloud.Errorf(cloud.EUNAUTHORIZED, "missing or invalid API key")
		return
	}
	info.key = key
}

// addrBucket is the rate-limit bucket of the request's client address.
func addrBucket(info *reqInfo, r *http.Request) string { return "a:" + info.clientAddr(r) }

// maxKnownKeys bounds the set of Authorization values that verified.
const maxKnownKeys = 10_000

// knownKey reports whether this Authorization header value has verified
// before, by its SHA-256 sum (the key itself is not kept), with the
// rate-limit bucket of its key ("k:" and the key id, built once), and
// returns the sum for rememberKey.
func (s *Server) knownKey(header string) (sum [32]byte, bucket string, known bool) {
	if header == "" {
		return sum, "", false
	}
	sum = sha256.Sum256([]byte(header))
	s.knownMu.RLock()
	bucket, known = s.known[sum]
	s.knownMu.RUnlock()
	return sum, bucket, known
}

// rememberKey adds the sum of an Authorization header value that verified,
// with its key's rate-limit bucket.
func (s *Server) rememberKey(sum [32]byte, bucket string) {
	s.knownMu.Lock()
	if len(s.known) >= maxKnownKeys {
		for k := range s.known { // random eviction
			delete(s.known, k)
			break
		}
	}
	s.known[sum] = bucket
	s.knownMu.Unlock()
}

// keyHandler is an endpoint handler that runs with an authenticated key. It
// returns the error to answer with, or nil once it has answered.
type keyHandler func(w http.ResponseWriter, r *http.Request, key *cloud.APIKey) error

// scoped requires an authenticated key holding scope: 401 otherwise (with
// the authenticator's code: unauthorized, api_key_expired, api_key_revoked),
// 403 insufficient_scope naming the scope when the key lacks it.
func (s *Server) scoped(scope string, h keyHandler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		info := infoFrom(w)
		if info == nil || info.key == nil {
			var err error = cloud.Errorf(cloud.EUNAUTHORIZED, "missing or invalid API key")
			if info != nil && info.authErr != nil {
				err = info.authErr
			}
			s.writeError(w, r, err)
			return
		}
		if !info.key.HasScope(scope) {
			info.needScope = scope
			s.writeError(w, r, cloud.Errorf(cloud.EFORBIDDEN, "this endpoint needs the scope %s, which the API key does not hold", scope))
			return
		}
		if err := h(w, r, info.key); err != nil {
			s.writeError(w, r, err)
		}
	}
}

// readJSONBody checks the media type (415) and reads the body within
// MaxBodyBytes (413).
func readJSONBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	if !isJSON(r.Header.Get("Content-Type")) {
		return nil, cloud.Errorf(codeMediaType, "Content-Type must be application/json")
	}
	if r.ContentLength > MaxBodyBytes {
		return nil, tooLarge()
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return nil, tooLarge()
		}
		return nil, cloud.Errorf(codeInvalidJSON, "could not read the request body")
	}
	return body, nil
}

// isJSON accepts application/json with an optional utf-8 charset.
func isJSON(ct string) bool {
	if ct == "application/json" {
		return true
	}
	mt, params, err := mime.ParseMediaType(ct)
	if err != nil || mt != "application/json" {
		return false
	}
	for k, v := range params {
		if k != "charset" || !strings.EqualFold(v, "utf-8") {
			return false
		}
	}
	return true
}

func itoa(n int) string { return strconv.Itoa(n) }

// accessLines holds the buffers of access-log lines (*[]byte).
var accessLines = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

// appendAccessLine appends the access-log line of a request (Config's
// AccessLogTo) to b: the object slog's JSON handler writes for
// recordRequest's record at Info with "component":"api", time first
// (RFC 3339 with nanoseconds, as slog), duration_ms in milliseconds with
// microseconds (encoding/json's form of the float slog would write).
func appendAccessLine(b []byte, now time.Time, id, method, path string, status int, took time.Duration, bytes int64, keyID, remote string) []byte {
	b = append(b, `{"time":"`...)
	b = now.Round(0).AppendFormat(b, time.RFC3339Nano)
	b = append(b, `","level":"INFO","msg":"request","component":"api","request_id":`...)
	b = appendJSONString(b, id)
	b = append(b, `,"method":`...)
	b = appendJSONString(b, method)
	b = append(b, `,"path":`...)
	b = appendJSONString(b, path)
	b = append(b, `,"status":`...)
	b = strconv.AppendInt(b, int64(status), 10)
	b = append(b, `,"duration_ms":`...)
	b = strconv.AppendFloat(b, float64(took.Microseconds())/1000, 'f', -1, 64)
	b = append(b, `,"bytes":`...)
	b = strconv.AppendInt(b, bytes, 10)
	b = append(b, `,"key_id":`...)
	b = appendJSONString(b, keyID)
	b = append(b, `,"remote":`...)
	b = appendJSONString(b, remote)
	return append(b, "}\n"...)
}

// appendJSONString appends s as a JSON string (invalid UTF-8 replaced, as
// slog does).
func appendJSONString(b []byte, s string) []byte {
	out, _ := jsontext.AppendQuote(b, s)
	return out
}
