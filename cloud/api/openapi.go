package api

import (
	_ "embed"
	"net/http"
)

//go:embed openapi.json
var openapiDoc []byte

// OpenAPI returns a copy of the OpenAPI 3.1 description of the public API,
// which the server also serves without authentication at
// /api/v1/public/openapi.json.
func OpenAPI() []byte { return append([]byte(nil), openapiDoc...) }

func (s *Server) openAPI(w http.ResponseWriter, r *http.Request) {
	writeBody(w, r, openapiDoc, "public, max-age=300")
}
