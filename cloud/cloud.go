// Package cloud holds the relay's domain: its types, the errors it maps to
// API error codes, and the service interfaces that its packages implement
// (sqlite: the store; api: the public REST API; agentlink: the agents'
// websocket endpoint; alert: the alert engine; webhook: signed deliveries).
// Wiring happens only in cloud/relay (fleet-relay's Main).
package cloud

import (
	"errors"
	"fmt"
	"strings"
	"syscall"
	"time"
)

// Error codes. Each maps to one HTTP status in the api package.
const (
	ECONFLICT     = "conflict"
	EINTERNAL     = "internal_error"
	EINVALID      = "validation_error"
	ENOTFOUND     = "not_found"
	EUNAUTHORIZED = "unauthorized"
	EFORBIDDEN    = "insufficient_scope"
	EEXPIRED      = "api_key_expired"
	EREVOKED      = "api_key_revoked"
	ECURSOR       = "invalid_cursor"
	EKIND         = "kind_mismatch"
	ECAPABILITY   = "capability_unavailable"
	ERESOLVED     = "alert_already_resolved"
	ENOTCONFIG    = "channel_not_configurable"
	EUNAVAILABLE  = "channel_unavailable"
	// ESERVICEUNAVAILABLE: the store cannot take the request now (its disk
	// is full, or it is unreachable); retrying later can succeed.
	ESERVICEUNAVAILABLE = "service_unavailable"
)

// Error is a domain error with a code and a message safe to show a customer.
type Error struct {
	Code    string
	Message string
	// Err is the cause, for logs (never shown to a customer); may be nil.
	Err error
}

func (e *Error) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("%s: %s: %v", e.Code, e.Message, e.Err)
	}
	return fmt.Sprintf("%s: %s", e.Code, e.Message)
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// Unavailable is the ESERVICEUNAVAILABLE error of a store that cannot reach its
// database; cause is kept for the logs.
func Unavailable(cause error) error {
	return &Error{Code: ESERVICEUNAVAILABLE, Message: "the service is temporarily unavailable (its database cannot be reached); retry shortly", Err: cause}
}

// Errorf returns an *Error with code and a formatted message.
func Errorf(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// ErrorCode returns the code of err if it is (or wraps) an *Error, and
// EINTERNAL otherwise.
func ErrorCode(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return EINTERNAL
}

// StorageFull reports whether err says the store's disk is full. The
// stores' drivers say so only in their messages: SQLite's SQLITE_FULL
// ("database or disk is full"), the kernel's ENOSPC ("no space left on
// device"), which PostgreSQL repeats in its disk_full errors.
func StorageFull(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, syscall.ENOSPC) {
		return true
	}
	m := strings.ToLower(err.Error())
	return strings.Contains(m, "database or disk is full") || strings.Contains(m, "no space left on device")
}

// ErrorMessage returns the customer-safe message of err; internal errors get
// a generic message, never their text.
func ErrorMessage(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Message
	}
	return "internal error"
}

// Scopes of API keys.
const (
	ScopeDevicesRead  = "devices:read"
	ScopeDevicesWrite = "devices:write"
	ScopeMetricsRead  = "metrics:read"
	ScopeLogsRead     = "logs:read"
	ScopeAlertsRead   = "alerts:read"
	ScopeAlertsWrite  = "alerts:write"
)

// AllScopes lists every scope.
var AllScopes = []string{ScopeDevicesRead, ScopeDevicesWrite, ScopeMetricsRead, ScopeLogsRead, ScopeAlertsRead, ScopeAlertsWrite}

// Org is an organization.
type Org struct {
	ID              string
	Name            string
	WebhookSecret   string
	AlertWebhookURL string
	CreatedAt       time.Time
}

// APIKey is an organization's API key; the secret is never kept, only its
// bcrypt hash.
type APIKey struct {
	ID        string
	OrgID     string
	Name      string
	Hash      []byte
	Scopes    []string
	ExpiresAt time.Time // zero: never
	RevokedAt time.Time // zero: not revoked
	CreatedAt time.Time
}

// HasScope reports whether the key holds scope.
func (k *APIKey) HasScope(scope string) bool {
	for _, s := range k.Scopes {
		if s == scope {
			return true
		}
	}
	return false
}

// Now is the clock type injected wherever time matters.
type Now func() time.Time
