package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/internal/onewrite"
	"github.com/fleet/fleet/shared/jsonstrict"
	"github.com/fleet/fleet/shared/resource"
)

// Error codes that exist only at the HTTP layer (the domain's are in cloud).
const (
	codeInvalidJSON      = "invalid_json"
	codeMethodNotAllowed = "method_not_allowed"
	codeTooLarge         = "payload_too_large"
	codeMediaType        = "unsupported_media_type"
	codeRateLimited      = "rate_limited"
)

// statusOf maps every error code to its HTTP status: the one table of
// DESIGN.md. Unknown codes are 500.
func statusOf(code string) int {
	switch code {
	case cloud.EINVALID, codeInvalidJSON, cloud.ECURSOR, cloud.EKIND:
		return http.StatusBadRequest
	case cloud.EUNAUTHORIZED, cloud.EEXPIRED, cloud.EREVOKED:
		return http.StatusUnauthorized
	case cloud.EFORBIDDEN:
		return http.StatusForbidden
	case cloud.ENOTFOUND:
		return http.StatusNotFound
	case codeMethodNotAllowed:
		return http.StatusMethodNotAllowed
	case cloud.ECONFLICT, cloud.ECAPABILITY, cloud.ERESOLVED, cloud.ENOTCONFIG, cloud.EUNAVAILABLE:
		return http.StatusConflict
	case codeTooLarge:
		return http.StatusRequestEntityTooLarge
	case codeMediaType:
		return http.StatusUnsupportedMediaType
	case codeRateLimited:
		return http.StatusTooManyRequests
	case cloud.ESERVICEUNAVAILABLE:
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

// bodyError turns a jsonstrict error into the API's error: syntax problems
// are invalid_json, field problems validation_error naming the field, and an
// oversized body payload_too_large.
func bodyError(err error) error {
	var tooBig *http.MaxBytesError
	var se *jsonstrict.SyntaxError
	var fe *jsonstrict.FieldError
	switch {
	case errors.As(err, &tooBig):
		return tooLarge()
	case errors.As(err, &se):
		return cloud.Errorf(codeInvalidJSON, "%s", se.Msg)
	case errors.As(err, &fe):
		if fe.Field == "" {
			return cloud.Errorf(cloud.EINVALID, "%s", fe.Msg)
		}
		return cloud.Errorf(cloud.EINVALID, "%s: %s", fe.Field, fe.Msg)
	}
	return err
}

func tooLarge() error {
	return cloud.Errorf(codeTooLarge, "request body is larger than %d bytes", MaxBodyBytes)
}

// writeError answers with the error envelope. Internal errors are logged
// with the request id and never shown.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	if cloud.ErrorCode(err) == cloud.EINTERNAL && cloud.StorageFull(err) {
		// Not a bug of ours: the store's disk is full. Logged (rarely
		// more than once a second) so the operator sees why.
		s.logStorageFull(r, err)
		w.Header().Set("Retry-After", "30")
		err = cloud.Errorf(cloud.ESERVICEUNAVAILABLE, "the relay's storage is full; retry later")
	}
	code := cloud.ErrorCode(err)
	status := statusOf(code)
	msg := cloud.ErrorMessage(err)
	info := infoFrom(w)
	if status == http.StatusInternalServerError {
		code = cloud.EINTERNAL
		msg = "internal error"
		if info != nil {
			msg += " (request id " + info.id + ")"
		}
		s.log.LogAttrs(r.Context(), slog.LevelError, "internal error",
			slog.String("request_id", requestID(info)),
			slog.String("method", r.Method),
			slog.String("path", safePath(r.URL.Path)),
			slog.String("error", err.Error()))
	}
	h := w.Header()
	switch status {
	case http.StatusServiceUnavailable:
		if h.Get("Retry-After") != "" {
			break // storage full: logged above
		}
		// The store cannot reach its database.
		h.Set("Retry-After", "5")
		s.log.LogAttrs(r.Context(), slog.LevelWarn, "service unavailable",
			slog.String("request_id", requestID(info)),
			slog.String("method", r.Method),
			slog.String("path", safePath(r.URL.Path)),
			slog.String("error", err.Error()))
	case http.StatusUnauthorized:
		v := `Bearer realm="fleet"`
		if r.Header.Get("Authorization") != "" {
			v += `, error="invalid_token"`
		}
		h["WWW-Authenticate"] = []string{v}
	case http.StatusForbidden:
		if info != nil && info.needScope != "" {
			h["WWW-Authenticate"] = []string{`Bearer realm="fleet", error="insufficient_scope", scope="` + info.needScope + `"`}
		}
	}
	s.writeJSON(w, status, resource.ErrorBody{Error: resource.ErrorDetail{Code: code, Message: msg}})
}

// writeJSON renders v with status; the body is built first so that
// Content-Length is set and a marshalling failure becomes a clean 500.
func (s *Server) writeJSON(w http.ResponseWriter, status int, v any) {
	buf := s.getBuf()
	defer s.putBuf(buf)
	enc := json.NewEncoder(buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		buf.Reset()
		status = http.StatusInternalServerError
		buf.WriteString(`{"error":{"code":"internal_error","message":"internal error"}}` + "\n")
		s.log.Error("encode response", slog.String("error", err.Error()))
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(buf.Len()))
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// writeAppended renders a 200 body built by fn into a pooled buffer; an
// error from fn is returned before anything is written.
func (s *Server) writeAppended(w http.ResponseWriter, r *http.Request, fn func([]byte) ([]byte, error)) error {
	return s.writeAppendedAs(w, r, contentJSON, fn)
}

// writeAppendedAs is writeAppended with the body's Content-Type.
func (s *Server) writeAppendedAs(w http.ResponseWriter, r *http.Request, contentType string, fn func([]byte) ([]byte, error)) error {
	buf := s.getBuf()
	defer s.putBuf(buf)
	out, err := fn(buf.Bytes()[:0])
	if err != nil {
		return err
	}
	writeBodyAs(w, r, contentType, out, "no-store")
	if cap(out) > buf.Cap() {
		*buf = *bytes.NewBuffer(out[:0])
	}
	return nil
}

// writeBody sends a 200 JSON body with the given Cache-Control, in one
// write to the socket where the relay's listener allows (onewrite).
func writeBody(w http.ResponseWriter, r *http.Request, body []byte, cacheControl string) {
	writeBodyAs(w, r, contentJSON, body, cacheControl)
}

// writePage sends a cached page as writeBody does (JSON, no-store), its
// header values shared, built once: no allocation for the header.
func (s *Server) writePage(w http.ResponseWriter, r *http.Request, p page) {
	h := w.Header()
	h["Content-Type"] = s.hdrJSON
	h["Content-Length"] = p.length
	h["Cache-Control"] = s.hdrNoStore
	w.WriteHeader(http.StatusOK)
	_ = onewrite.Write(w, r, p.body)
}

// writeBodyAs is writeBody with the body's Content-Type.
func writeBodyAs(w http.ResponseWriter, r *http.Request, contentType string, body []byte, cacheControl string) {
	h := w.Header()
	h.Set("Content-Type", contentType)
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("Cache-Control", cacheControl)
	w.WriteHeader(http.StatusOK)
	_ = onewrite.Write(w, r, body)
}

func (s *Server) getBuf() *bytes.Buffer {
	if b, ok := s.bufs.Get().(*bytes.Buffer); ok {
		b.Reset()
		return b
	}
	return bytes.NewBuffer(make([]byte, 0, 8<<10))
}

func (s *Server) putBuf(b *bytes.Buffer) {
	if b.Cap() <= 256<<10 {
		s.bufs.Put(b)
	}
}

// logStorageFull logs a request refused because the store's disk is full,
// at most one line a second.
func (s *Server) logStorageFull(r *http.Request, err error) {
	now := time.Now().UnixNano()
	last := s.fullLogged.Load()
	if now-last < int64(time.Second) || !s.fullLogged.CompareAndSwap(last, now) {
		return
	}
	s.log.LogAttrs(r.Context(), slog.LevelError, "storage full: request refused with 503",
		slog.String("method", r.Method), slog.String("path", safePath(r.URL.Path)), slog.String("error", err.Error()))
}
