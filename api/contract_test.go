package api_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	"github.com/pb33f/libopenapi-validator/config"
	verrors "github.com/pb33f/libopenapi-validator/errors"
	"github.com/pb33f/libopenapi-validator/schema_validation"
	"github.com/pb33f/libopenapi/datamodel/high/base"
	v3 "github.com/pb33f/libopenapi/datamodel/high/v3"

	"github.com/orderly/orderly/api"
)

// contract is the API's OpenAPI 3.1 document (api/openapi.yaml) loaded for
// validating the tests' exchanges with pb33f/libopenapi-validator.
type contract struct {
	// mu serialises validations: libopenapi renders schemas lazily and
	// races with itself when two goroutines validate at once.
	mu    sync.Mutex
	model *v3.Document
	// full validates requests and whole responses: status, headers and
	// body. Strict mode makes an undeclared header or query parameter a
	// mismatch; bodies are left to their schemas, which the document
	// closes with additionalProperties: false where the API is strict.
	full validator.Validator
	// noBody validates the status and headers of responses without a
	// body (HEAD).
	noBody validator.Validator
	// schemas validates bodies against single schemas of the document
	// (answers to paths the document does not have).
	schemas schema_validation.SchemaValidator
}

// loadContract parses the document once; every test shares it.
var loadContract = sync.OnceValues(func() (*contract, error) {
	doc, err := libopenapi.NewDocument(api.OpenAPIYAML())
	if err != nil {
		return nil, fmt.Errorf("parse api/openapi.yaml: %w", err)
	}
	m, err := doc.BuildV3Model()
	if err != nil {
		return nil, fmt.Errorf("build api/openapi.yaml: %w", err)
	}
	opts := []config.Option{config.WithFormatAssertions(), config.WithStrictMode(), config.WithStrictIgnorePaths("$.body.**")}
	full, errs := validator.NewValidator(doc, opts...)
	if len(errs) > 0 {
		return nil, fmt.Errorf("api/openapi.yaml: %w", errors.Join(errs...))
	}
	c := &contract{
		model:   &m.Model,
		full:    full,
		noBody:  validator.NewValidatorFromV3Model(&m.Model, append(opts, config.WithoutResponseBodyValidation())...),
		schemas: schema_validation.NewSchemaValidator(opts...),
	}
	if ok, errs := c.full.ValidateDocument(); !ok {
		return nil, fmt.Errorf("api/openapi.yaml is not a valid OpenAPI document: %w", joinErrors(errs))
	}
	return c, nil
})

// check validates one exchange against the document: req, whose body is
// body, and the response status, header and body it got. A request the test
// marked malformed is not validated, except that one the document does have
// must get a response it describes, and one it does not have (no such path
// or method) must get the document's NotFound or MethodNotAllowed response.
// Any other request must be valid, and so must its response. The error
// names every mismatch.
func (c *contract) check(req *http.Request, body []byte, malformed bool, status int, header http.Header, respBody []byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	fresh := func(method string) *http.Request {
		r := req.Clone(req.Context())
		r.Method = method
		r.Body = io.NopCloser(bytes.NewReader(body))
		return r
	}
	method := req.Method
	if method == http.MethodHead {
		method = http.MethodGet // HEAD is served wherever GET is
	}
	ok, errs := c.full.ValidateHttpRequestSync(fresh(method))
	if !ok && outsideDocument(errs) {
		if !malformed {
			return fmt.Errorf("contract: %s %s is not in api/openapi.yaml: %w", req.Method, req.URL.Path, joinErrors(errs))
		}
		return c.checkUnrouted(status, header, respBody)
	}
	if !ok && !malformed {
		return fmt.Errorf("contract: the request does not match api/openapi.yaml: %w", joinErrors(errs))
	}
	resp := &http.Response{StatusCode: status, Header: header, Body: io.NopCloser(bytes.NewReader(respBody))}
	v := c.full
	if req.Method == http.MethodHead {
		v = c.noBody
	}
	if ok, errs := v.ValidateHttpResponse(fresh(method), resp); !ok {
		return fmt.Errorf("contract: the %d response does not match api/openapi.yaml: %w", status, joinErrors(errs))
	}
	return nil
}

// checkUnrouted checks the answer to a request for a path or method the
// document does not have against its NotFound or MethodNotAllowed response.
func (c *contract) checkUnrouted(status int, header http.Header, body []byte) error {
	name := map[int]string{http.StatusNotFound: "NotFound", http.StatusMethodNotAllowed: "MethodNotAllowed"}[status]
	if name == "" {
		return fmt.Errorf("contract: a request outside api/openapi.yaml got a %d, want 404 or 405", status)
	}
	want := c.model.Components.Responses.GetOrZero(name)
	for h, spec := range want.Headers.FromOldest() {
		if spec.Required && header.Get(h) == "" {
			return fmt.Errorf("contract: the %d lacks the header %s its response %s requires", status, h, name)
		}
	}
	mt := want.Content.GetOrZero("application/problem+json")
	if got := header.Get("Content-Type"); got != "application/problem+json" {
		return fmt.Errorf("contract: the %d has Content-Type %q, want application/problem+json", status, got)
	}
	return c.validateSchema(mt.Schema.Schema(), body)
}

// validateSchema validates body against schema.
func (c *contract) validateSchema(schema *base.Schema, body []byte) error {
	if ok, errs := c.schemas.ValidateSchemaBytes(schema, body); !ok {
		return fmt.Errorf("contract: %s does not match its schema: %w", bytes.TrimSpace(body), joinErrors(errs))
	}
	return nil
}

// outsideDocument reports whether errs say the document has no such path or
// no such method on it.
func outsideDocument(errs []*verrors.ValidationError) bool {
	for _, e := range errs {
		if e.IsPathMissingError() || e.IsOperationMissingError() {
			return true
		}
	}
	return false
}

// joinErrors joins validation errors, with the schema failures each lists.
func joinErrors(errs []*verrors.ValidationError) error {
	var all []error
	for _, e := range errs {
		msg := e.Message + ": " + e.Reason
		for _, f := range e.SchemaValidationErrors {
			msg += fmt.Sprintf(" [%s at %s]", f.Reason, strings.Join(f.InstancePath, "/"))
		}
		all = append(all, errors.New(msg))
	}
	return errors.Join(all...)
}
