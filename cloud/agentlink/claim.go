package agentlink

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/internal/clientaddr"
	"github.com/fleet/fleet/shared/jsonstrict"
	"github.com/fleet/fleet/shared/protocol"
)

// MaxClaimBody bounds the body of a claim request (protocol.ClaimRequest).
const MaxClaimBody = 4 << 10

// refusedBadClaim counts claim tokens refused (unknown, revoked, expired,
// used up).
const refusedBadClaim = "refused_claim"

// ClaimHandler returns the endpoint that redeems claim tokens, to be
// mounted at protocol.ClaimPath: POST with the claim token as bearer
// token and a protocol.ClaimRequest (at most MaxClaimBody bytes) as body;
// it answers a protocol.ClaimResponse, 401 naming why a claim is refused,
// 400 for a bad body, 409 for a serial number registered otherwise.
// Refused tokens count against the client address as the websocket's
// refused device tokens do (429 past the budget, without a lookup), and
// the tokens are never logged.
func (s *Server) ClaimHandler(claims cloud.ClaimService) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			writeError(w, http.StatusMethodNotAllowed, "method_not_allowed", "the claim endpoint takes POST")
			return
		}
		w.Header().Set("Cache-Control", "no-store")
		addr := clientaddr.Key(r)
		tok := s.refusals.bearer(w, r, addr, "a claim token")
		if tok == "" {
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxClaimBody))
		var tooBig *http.MaxBytesError
		switch {
		case errors.As(err, &tooBig):
			writeError(w, http.StatusRequestEntityTooLarge, "payload_too_large", "the claim request is larger than 4096 bytes")
			return
		case err != nil:
			writeError(w, http.StatusBadRequest, "invalid_json", "the claim request could not be read")
			return
		}
		var req protocol.ClaimRequest
		if err := jsonstrict.Decode(body, &req); err != nil {
			var fe *jsonstrict.FieldError
			if errors.As(err, &fe) {
				writeError(w, http.StatusBadRequest, cloud.EINVALID, err.Error())
			} else {
				writeError(w, http.StatusBadRequest, "invalid_json", err.Error())
			}
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
		remote := clientaddr.Host(r)
		out, err := claims.RedeemClaim(ctx, cloud.ClaimRedeem{Token: tok, ClaimRequest: req, At: s.now(), IP: remote})
		cancel()
		if err != nil {
			code, msg := cloud.ErrorCode(err), cloud.ErrorMessage(err)
			switch code {
			case cloud.EUNAUTHORIZED:
				s.refusals.refuse(w, r, addr, refusedBadClaim, msg)
			case cloud.EINVALID:
				writeError(w, http.StatusBadRequest, code, msg)
			case cloud.ECONFLICT:
				writeError(w, http.StatusConflict, code, msg)
			case cloud.ESERVICEUNAVAILABLE:
				w.Header().Set("Retry-After", "5")
				writeError(w, http.StatusServiceUnavailable, code, msg)
			default:
				s.log.Error("claim not redeemed", "remote", remote, "err", err)
				writeError(w, http.StatusInternalServerError, cloud.EINTERNAL, "internal error")
			}
			return
		}
		s.log.Info("gateway claimed", "device", out.DeviceID, "serialNumber", req.SerialNumber, "remote", remote)
		w.Header().Set("Content-Type", "application/json")
		b, _ := json.Marshal(out)
		w.Write(b)
	})
}
