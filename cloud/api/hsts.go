package api

import (
	"net/http"
	"net/url"
)

// HSTSValue is the Strict-Transport-Security header a relay with an
// https public URL sends: browsers reach it only over HTTPS for a year.
// It names no includeSubDomains: the relay's host says nothing of its
// siblings (a company's other sites under the same domain may still be
// plain HTTP); a proxy in front can add it.
const HSTSValue = "max-age=31536000"

// HSTS returns next with every response carrying Strict-Transport-Security
// when publicURL (the relay's --public-url) is https, and next itself
// otherwise: a relay whose public address is plain HTTP promises nothing.
// The header is sent whether TLS ends at the relay or at a proxy in
// front of it (the browser sees https either way).
func HSTS(publicURL string, next http.Handler) http.Handler {
	if !IsHTTPS(publicURL) {
		return next
	}
	value := []string{HSTSValue}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header()["Strict-Transport-Security"] = value
		next.ServeHTTP(w, r)
	})
}

// IsHTTPS reports whether publicURL is an absolute https URL.
func IsHTTPS(publicURL string) bool {
	u, err := url.Parse(publicURL)
	return err == nil && u.Scheme == "https" && u.Host != ""
}
