package api_test

import (
	"encoding/json"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"
	"go.yaml.in/yaml/v3"

	"github.com/orderly/orderly/api"
	"github.com/orderly/orderly/internal/testenv"
	"github.com/orderly/orderly/payment/stripepay"
	"github.com/orderly/orderly/paysim/paysimclient"
	webhooks "github.com/orderly/orderly/webhook"
)

// TestOpenAPIRoutes: every route of the router is an operation of the
// OpenAPI document, and every operation of the document is routed.
func TestOpenAPIRoutes(t *testing.T) {
	t.Parallel()
	doc, err := loadContract()
	if err != nil {
		t.Fatal(err)
	}
	// Every optional route is on: the event feed and webhook endpoints, and
	// the provider's webhooks (paysim's native and Stripe's).
	routed := routerOperations(t, api.New(nil, api.Config{
		APIKeys:         map[string]string{testenv.KeyA: testenv.TenantA},
		Events:          &webhooks.Endpoints{},
		ProviderWebhook: paysimclient.Webhooks{},
		StripeWebhook:   stripepay.Webhooks{},
	}))
	var documented []string
	for path, item := range doc.model.Paths.PathItems.FromOldest() {
		for method := range item.GetOperations().FromOldest() {
			documented = append(documented, strings.ToUpper(method)+" "+path)
		}
	}
	slices.Sort(documented)
	for _, op := range routed {
		if !slices.Contains(documented, op) {
			t.Errorf("%s is routed but not in api/openapi.yaml", op)
		}
	}
	for _, op := range documented {
		if !slices.Contains(routed, op) {
			t.Errorf("%s is in api/openapi.yaml but not routed", op)
		}
	}
}

// chiParam matches a chi path parameter with a regular expression,
// {id:[0-9]+}, so it can be written as OpenAPI writes it, {id}.
var chiParam = regexp.MustCompile(`\{([^}:]+):[^}]*\}`)

// routerOperations returns "METHOD /path" for every route of h, a chi
// router, with path parameters as OpenAPI writes them.
func routerOperations(t *testing.T, h http.Handler) []string {
	t.Helper()
	routes, ok := h.(chi.Routes)
	if !ok {
		t.Fatalf("api.New returned a %T, not a chi router", h)
	}
	var ops []string
	err := chi.Walk(routes, func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		route = chiParam.ReplaceAllString(route, "{$1}")
		if len(route) > 1 {
			route = strings.TrimSuffix(route, "/")
		}
		ops = append(ops, method+" "+route)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(ops)
	return slices.Compact(ops)
}

// TestRouterOperationsNormalises: the walk writes chi's patterns as OpenAPI
// paths, so TestOpenAPIRoutes compares like with like, and it sees an extra
// route.
func TestRouterOperationsNormalises(t *testing.T) {
	t.Parallel()
	r := chi.NewRouter()
	nop := func(http.ResponseWriter, *http.Request) {}
	r.Route("/v1", func(r chi.Router) {
		r.Get("/things/{id:[0-9]+}", nop)
		r.Post("/things/", nop)
	})
	got := routerOperations(t, r)
	want := []string{"GET /v1/things/{id}", "POST /v1/things"}
	if !slices.Equal(got, want) {
		t.Fatalf("walk gave %q, want %q", got, want)
	}
}

// TestOpenAPIServed: GET /openapi.yaml and GET /openapi.json serve the
// document without an API key, and the two say the same.
func TestOpenAPIServed(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, testenv.SQLite, testenv.Options{})
	y := do(t, env, http.MethodGet, "/openapi.yaml", "", "", nil)
	wantStatus(t, y, http.StatusOK)
	if ct := y.Header.Get("Content-Type"); ct != "application/yaml" {
		t.Errorf("/openapi.yaml Content-Type = %q, want application/yaml", ct)
	}
	if string(y.Body) != string(api.OpenAPIYAML()) {
		t.Error("/openapi.yaml is not the embedded document")
	}
	j := do(t, env, http.MethodGet, "/openapi.json", "", "", nil)
	wantStatus(t, j, http.StatusOK)
	var fromYAML, fromJSON any
	if err := yaml.Unmarshal(y.Body, &fromYAML); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(j.Body, &fromJSON); err != nil {
		t.Fatal(err)
	}
	// Compare through JSON, which gives both the same number types.
	a, _ := json.Marshal(fromYAML)
	b, _ := json.Marshal(fromJSON)
	if string(a) != string(b) {
		t.Errorf("/openapi.json differs from /openapi.yaml")
	}
	if v, _ := fromJSON.(map[string]any)["openapi"].(string); !strings.HasPrefix(v, "3.1.") {
		t.Errorf("openapi = %q, want 3.1.x", v)
	}
}
