package sqlstore

import (
	"context"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/shared/protocol"
)

// Claims (issue 28, lane claims): cloud.ClaimService on ClaimTables,
// written once for both stores. CONTRACT STUB: the claims lane replaces it.

// ClaimTables are the claim queries.
type ClaimTables interface{}

// ClaimService implements cloud.ClaimService.
type ClaimService struct{ Tables Tables }

var errStub = &cloud.Error{Code: cloud.EINTERNAL, Message: "not implemented yet"}

// CreateClaim implements cloud.ClaimService.
func (s *ClaimService) CreateClaim(ctx context.Context, nc cloud.NewClaim) (cloud.Claim, string, error) {
	return cloud.Claim{}, "", errStub
}

// ListClaims implements cloud.ClaimService.
func (s *ClaimService) ListClaims(ctx context.Context, orgID string) ([]cloud.Claim, error) {
	return nil, errStub
}

// RevokeClaim implements cloud.ClaimService.
func (s *ClaimService) RevokeClaim(ctx context.Context, orgID, id string) (cloud.Claim, error) {
	return cloud.Claim{}, errStub
}

// RedeemClaim implements cloud.ClaimService.
func (s *ClaimService) RedeemClaim(ctx context.Context, in cloud.ClaimRedeem) (protocol.ClaimResponse, error) {
	return protocol.ClaimResponse{}, errStub
}
