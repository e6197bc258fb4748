package api_test

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/orderly/orderly/api"
	"github.com/orderly/orderly/apperr"
	"github.com/orderly/orderly/internal/testclock"
	"github.com/orderly/orderly/internal/testenv"
	"github.com/orderly/orderly/order"
	"github.com/orderly/orderly/paysim/testmode"
)

// eachStore runs fn as one subtest per store kind, so every behaviour is
// proven on PostgreSQL and on SQLite alike.
func eachStore(t *testing.T, fn func(t *testing.T, kind string)) {
	t.Helper()
	for _, kind := range testenv.Kinds {
		t.Run(kind, func(t *testing.T) { fn(t, kind) })
	}
}

// reply is an HTTP response as the tests inspect it. Problem is set when the
// body is application/problem+json.
type reply struct {
	Status  int
	Header  http.Header
	Body    []byte
	Problem *api.Problem
}

// replayed reports whether the response says it replays a stored outcome.
func (r reply) replayed() bool { return r.Header.Get("Idempotency-Replayed") == "true" }

// String summarises r for failure messages: its status and the start of its
// body.
func (r reply) String() string {
	body := bytes.TrimSpace(r.Body)
	if len(body) > 2000 {
		return fmt.Sprintf("%d %s… (%d bytes)", r.Status, body[:2000], len(body))
	}
	return fmt.Sprintf("%d %s", r.Status, body)
}

// call is one request to the API. An empty APIKey sends no Authorization, an
// empty IdemKey no Idempotency-Key. Body nil sends no body; a string or
// []byte is sent as is; anything else is JSON-encoded. ContentType defaults
// to application/json when there is a body; "-" sends none. Header lines are
// added as given.
//
// send validates every request and its response against the OpenAPI
// document (api/openapi.yaml). Malformed marks a request the test makes
// deliberately outside the document (hostile input, a missing API key, an
// unknown route): only its response is validated.
type call struct {
	Method, Path string
	APIKey       string
	IdemKey      string
	Body         any
	ContentType  string
	Header       http.Header
	Malformed    bool
}

// client is shared by every test: a generous timeout so a deadlock fails the
// test instead of hanging it, and enough idle connections for the
// concurrency tests to reuse them.
var client = &http.Client{
	Timeout:   60 * time.Second,
	Transport: &http.Transport{MaxIdleConns: 256, MaxIdleConnsPerHost: 64},
}

// send performs c against env and reads the whole response, which must
// match the OpenAPI document, as must the request unless c.Malformed. It
// reports failures, a mismatch included, as errors, so goroutines may call
// it.
func send(env *testenv.Env, c call) (reply, error) {
	var payload []byte
	contentType := c.ContentType
	switch b := c.Body.(type) {
	case nil:
	case string:
		payload = []byte(b)
	case []byte:
		payload = b
	default:
		raw, err := json.Marshal(b)
		if err != nil {
			return reply{}, err
		}
		payload = raw
	}
	var body io.Reader
	if c.Body != nil {
		body = bytes.NewReader(payload)
	}
	if body != nil && contentType == "" {
		contentType = "application/json"
	}
	req, err := http.NewRequest(c.Method, env.Server.URL+c.Path, body)
	if err != nil {
		return reply{}, err
	}
	if contentType != "" && contentType != "-" {
		req.Header.Set("Content-Type", contentType)
	}
	if c.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.APIKey)
	}
	if c.IdemKey != "" {
		req.Header.Set("Idempotency-Key", c.IdemKey)
	}
	for name, values := range c.Header {
		for _, v := range values {
			req.Header.Add(name, v)
		}
	}
	resp, err := client.Do(req)
	if err != nil {
		return reply{}, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return reply{}, err
	}
	r := reply{Status: resp.StatusCode, Header: resp.Header, Body: raw}
	doc, err := loadContract()
	if err != nil {
		return reply{}, err
	}
	if err := doc.check(req, payload, c.Malformed, r.Status, r.Header, raw); err != nil {
		return reply{}, fmt.Errorf("%s %s: %w\n%s", c.Method, c.Path, err, r)
	}
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt == "application/problem+json" {
		r.Problem = new(api.Problem)
		if err := json.Unmarshal(raw, r.Problem); err != nil {
			return reply{}, fmt.Errorf("%s %s: undecodable problem %q: %w", c.Method, c.Path, raw, err)
		}
	}
	return r, nil
}

// exchange is send that fails the test on a transport error.
func exchange(t testing.TB, env *testenv.Env, c call) reply {
	t.Helper()
	r, err := send(env, c)
	if err != nil {
		t.Fatal(err) // names the method and path
	}
	return r
}

// do sends one request: method and path, as the tenant of apiKey, with the
// Idempotency-Key idemKey ("" for none) and body (see call).
func do(t testing.TB, env *testenv.Env, method, path, apiKey, idemKey string, body any) reply {
	t.Helper()
	return exchange(t, env, call{Method: method, Path: path, APIKey: apiKey, IdemKey: idemKey, Body: body})
}

// doMalformed is do for a request the test makes deliberately outside the
// OpenAPI document: only the response is validated against it.
func doMalformed(t testing.TB, env *testenv.Env, method, path, apiKey, idemKey string, body any) reply {
	t.Helper()
	return exchange(t, env, call{Method: method, Path: path, APIKey: apiKey, IdemKey: idemKey, Body: body, Malformed: true})
}

// wantReplayOf fails the test unless r replays an outcome with status.
func wantReplayOf(t testing.TB, r reply, status int) {
	t.Helper()
	wantStatus(t, r, status)
	if !r.replayed() {
		t.Fatalf("response lacks Idempotency-Replayed: true: %s", r)
	}
}

// wantOrders fails the test unless tenant apiKey has exactly the orders ids
// (newest first) for customer.
func wantOrders(t testing.TB, env *testenv.Env, apiKey, customer string, ids ...string) {
	t.Helper()
	got := ordersOf(t, env, apiKey, customer)
	if strings.Join(got, ",") != strings.Join(ids, ",") {
		t.Fatalf("customer %s has orders %v, want %v", customer, got, ids)
	}
}

// decode decodes r's JSON body into v.
func decode[T any](t testing.TB, r reply) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(r.Body, &v); err != nil {
		t.Fatalf("decode %T from %s: %v", v, r, err)
	}
	return v
}

// orderOf decodes the order in r's body.
func orderOf(t testing.TB, r reply) order.Order {
	t.Helper()
	return decode[order.Order](t, r)
}

// wantStatus fails the test unless r has status.
func wantStatus(t testing.TB, r reply, status int) {
	t.Helper()
	if r.Status != status {
		t.Fatalf("status = %s, want %d", r, status)
	}
}

// wantProblem fails the test unless r is an application/problem+json
// response with status and the problem type of code.
func wantProblem(t testing.TB, r reply, status int, code apperr.Code) *api.Problem {
	t.Helper()
	wantStatus(t, r, status)
	if r.Problem == nil {
		t.Fatalf("Content-Type = %q, want application/problem+json (%s)", r.Header.Get("Content-Type"), r)
	}
	if want := api.ProblemBaseURI + string(code); r.Problem.Type != want {
		t.Fatalf("problem type = %q, want %q (%s)", r.Problem.Type, want, r)
	}
	if r.Problem.Status != status {
		t.Fatalf("problem status member = %d, want %d", r.Problem.Status, status)
	}
	return r.Problem
}

// wantFields fails the test unless the problem lists exactly the fields.
func wantFields(t testing.TB, p *api.Problem, fields ...string) {
	t.Helper()
	var got []string
	for _, fe := range p.Errors {
		got = append(got, fe.Field)
	}
	slices.Sort(got)
	fields = slices.Sorted(slices.Values(fields))
	if !slices.Equal(got, fields) {
		t.Fatalf("problem errors name fields %q, want %q (%+v)", got, fields, p.Errors)
	}
}

// newKey returns a fresh idempotency key.
func newKey(t testing.TB) string {
	t.Helper()
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "key-" + hex.EncodeToString(b[:])
}

// newCustomer returns a fresh customer id, so a test can count its own
// orders with the customer_id filter in an environment other subtests share.
func newCustomer(t testing.TB) string {
	t.Helper()
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "cus_" + hex.EncodeToString(b[:])
}

// orderBody is a valid create body for customer: two books, 2500 USD cents.
func orderBody(customer string) map[string]any {
	return map[string]any{
		"customer_id": customer,
		"currency":    "USD",
		"items":       []map[string]any{{"sku": "sku_book", "quantity": 2, "unit_price": 1250}},
	}
}

// payBody is a valid pay body for o with payment method pm.
func payBody(o order.Order, pm string) map[string]any {
	return map[string]any{"amount": o.Amount, "currency": o.Currency, "payment_method": pm}
}

// eventPath is the path of event ev on order id.
func eventPath(id string, ev order.Event) string { return "/v1/orders/" + id + "/" + string(ev) }

// create creates an order for customer as tenant apiKey with key ("" for
// none) and returns it; the response must be a fresh 201.
func create(t testing.TB, env *testenv.Env, apiKey, key, customer string) order.Order {
	t.Helper()
	r := do(t, env, http.MethodPost, "/v1/orders", apiKey, key, orderBody(customer))
	wantStatus(t, r, http.StatusCreated)
	if r.replayed() {
		t.Fatalf("a fresh create was answered as a replay: %s", r)
	}
	return orderOf(t, r)
}

// fire sends event ev for tenant A's order o with key ("" for none); a pay
// carries o's amount and currency and an approved card.
func fire(t testing.TB, env *testenv.Env, o order.Order, ev order.Event, key string) reply {
	t.Helper()
	var body any
	if ev == order.EventPay {
		body = payBody(o, testmode.MethodApproved)
	}
	return do(t, env, http.MethodPost, eventPath(o.ID, ev), testenv.KeyA, key, body)
}

// get returns the order id as tenant apiKey sees it; it must exist.
func get(t testing.TB, env *testenv.Env, apiKey, id string) order.Order {
	t.Helper()
	r := do(t, env, http.MethodGet, "/v1/orders/"+id, apiKey, "", nil)
	wantStatus(t, r, http.StatusOK)
	return orderOf(t, r)
}

// page is the body of GET /v1/orders.
type page struct {
	Data       []order.Order `json:"data"`
	NextCursor string        `json:"next_cursor"`
}

// list returns one page of tenant apiKey's orders matching query.
func list(t testing.TB, env *testenv.Env, apiKey string, query url.Values) page {
	t.Helper()
	path := "/v1/orders"
	if len(query) > 0 {
		path += "?" + query.Encode()
	}
	r := do(t, env, http.MethodGet, path, apiKey, "", nil)
	wantStatus(t, r, http.StatusOK)
	return decode[page](t, r)
}

// ordersOf returns the ids of tenant apiKey's orders for customer ("" for
// all), newest first, following every page.
func ordersOf(t testing.TB, env *testenv.Env, apiKey, customer string) []string {
	t.Helper()
	q := url.Values{"limit": {"100"}}
	if customer != "" {
		q.Set("customer_id", customer)
	}
	var ids []string
	for {
		p := list(t, env, apiKey, q)
		for _, o := range p.Data {
			ids = append(ids, o.ID)
		}
		if p.NextCursor == "" {
			return ids
		}
		q.Set("cursor", p.NextCursor)
	}
}

// orderIn returns a fresh order of tenant A moved to state through the API.
func orderIn(t testing.TB, env *testenv.Env, state order.State) order.Order {
	t.Helper()
	o := create(t, env, testenv.KeyA, newKey(t), newCustomer(t))
	var path []order.Event
	switch state {
	case order.Received:
	case order.Paid:
		path = []order.Event{order.EventPay}
	case order.Fulfilled:
		path = []order.Event{order.EventPay, order.EventFulfill}
	case order.Cancelled:
		path = []order.Event{order.EventCancel}
	default:
		t.Fatalf("no path to state %q", state)
	}
	for _, ev := range path {
		wantStatus(t, fire(t, env, o, ev, newKey(t)), http.StatusOK)
	}
	o = get(t, env, testenv.KeyA, o.ID)
	if o.State != state {
		t.Fatalf("order %s is %s, want %s", o.ID, o.State, state)
	}
	return o
}

// together runs fn(0) … fn(n-1) in n goroutines released at the same
// instant, and returns their replies in index order. Transport errors fail
// the test after all goroutines have finished.
func together(t testing.TB, n int, fn func(i int) (reply, error)) []reply {
	t.Helper()
	replies := make([]reply, n)
	errs := make([]error, n)
	start := make(chan struct{})
	var ready, done sync.WaitGroup
	for i := range n {
		ready.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			ready.Done()
			<-start
			replies[i], errs[i] = fn(i)
		}()
	}
	ready.Wait()
	close(start)
	done.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
	}
	return replies
}

// newClock returns a clock for Options.Clock: the service's and the
// store's database clock, which decides leases and key expiry.
func newClock() *testclock.Clock { return testclock.New(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)) }
