package api

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"

	"go.yaml.in/yaml/v3"
)

// openAPIYAML is the OpenAPI 3.1 document of the API, api/openapi.yaml.
//
//go:embed openapi.yaml
var openAPIYAML []byte

// OpenAPIYAML returns the OpenAPI 3.1 document of the API (api/openapi.yaml)
// as GET /openapi.yaml serves it. The api tests validate every request and
// response they make against it.
func OpenAPIYAML() []byte { return bytes.Clone(openAPIYAML) }

// openAPIJSON converts the document to JSON once, on first use. The document
// is embedded, so an error here is a broken build that the api tests catch.
var openAPIJSON = sync.OnceValues(func() ([]byte, error) {
	var doc any
	if err := yaml.Unmarshal(openAPIYAML, &doc); err != nil {
		return nil, fmt.Errorf("api/openapi.yaml: %w", err)
	}
	return json.Marshal(doc)
})

// OpenAPIJSON returns the OpenAPI document in JSON, as GET /openapi.json
// serves it. Its error means the embedded YAML is not valid.
func OpenAPIJSON() ([]byte, error) {
	doc, err := openAPIJSON()
	return bytes.Clone(doc), err
}

// serveOpenAPIYAML answers GET /openapi.yaml (media type application/yaml,
// RFC 9512).
func (s *server) serveOpenAPIYAML(w http.ResponseWriter, r *http.Request) {
	writeDocument(w, "application/yaml", openAPIYAML)
}

// serveOpenAPIJSON answers GET /openapi.json.
func (s *server) serveOpenAPIJSON(w http.ResponseWriter, r *http.Request) {
	doc, err := openAPIJSON()
	if err != nil {
		writeError(w, r, s.log, err)
		return
	}
	writeDocument(w, "application/json", doc)
}

// writeDocument writes the document body with its media type. Unlike the
// API's answers it may be cached for a few minutes: it changes only with a
// new build.
func writeDocument(w http.ResponseWriter, mediaType string, body []byte) {
	w.Header().Set("Content-Type", mediaType)
	w.Header().Set("Cache-Control", "public, max-age=300")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(body)
}
