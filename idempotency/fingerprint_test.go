package idempotency

import (
	"errors"
	"regexp"
	"testing"

	"github.com/orderly/orderly/apperr"
)

// fingerprintSeeds are realistic request bodies used by the tests and as the
// fuzz corpus.
var fingerprintSeeds = []string{
	`{"customer_id":"cus_42","currency":"EUR","items":[{"sku":"SKU-1","quantity":2,"unit_price":1000},{"sku":"SKU-2","quantity":1,"unit_price":2599}]}`,
	`{"amount":1000,"currency":"EUR","payment_method":{"type":"card","token":"tok_visa"},"request_id":"r-1","client_timestamp":"2025-01-01T00:00:00Z"}`,
	`{"items":[{"sku":"SKU-1","quantity":1,"meta":{"trace_id":"abc","note":"gift"}}],"sent_at":1735689600,"nonce":"n-1"}`,
	`{"reason":"customer_request","refund":{"amount":1.5e3,"currency":"usd"}}`,
	`{}`,
	`[]`,
	`{"note":"caf\u00e9 <b>&</b> \u2028","tags":["a","b"],"gift":true,"coupon":null}`,
	``,
	` `,
	`{"amount":1e400}`,
	`{"a":1,"a":2}`,
	`{"amount":`,
}

// mustFingerprint returns the fingerprint of r under f, failing the test on
// error.
func mustFingerprint(t testing.TB, f Fingerprinter, r Request) string {
	t.Helper()
	fp, err := f.Fingerprint(r)
	if err != nil {
		t.Fatalf("Fingerprint(%+v) error = %v", r, err)
	}
	return fp
}

// bodyRequest returns a POST /v1/orders request with the given body.
func bodyRequest(body string) Request {
	return Request{Method: "POST", Route: "/v1/orders", Body: []byte(body)}
}

func TestFingerprintBodyEquivalence(t *testing.T) {
	tests := []struct {
		name string
		a, b string
	}{
		{"member order", `{"sku":"A","qty":2}`, `{"qty":2,"sku":"A"}`},
		{"nested member order",
			`{"items":[{"sku":"A","qty":2,"opts":{"x":1,"y":2}}],"currency":"EUR"}`,
			`{"currency":"EUR","items":[{"opts":{"y":2,"x":1},"qty":2,"sku":"A"}]}`},
		{"whitespace", `{"sku":"A","qty":2}`, "\n{ \"sku\" :\t\"A\" ,\r\n \"qty\" : 2 }\n"},
		{"number 1000.0", `{"amount":1000}`, `{"amount":1000.0}`},
		{"number 1e3", `{"amount":1000}`, `{"amount":1e3}`},
		{"number 1E3", `{"amount":1000}`, `{"amount":1E3}`},
		{"number 10e2", `{"amount":1000}`, `{"amount":10e2}`},
		{"number 1e+3", `{"amount":1000}`, `{"amount":1e+3}`},
		{"string escapes", `{"note":"café"}`, `{"note":"caf\u00e9"}`},
		{"volatile top level",
			`{"amount":1000,"currency":"EUR"}`,
			`{"amount":1000,"currency":"EUR","request_id":"r-1","timestamp":"2025-01-01T00:00:00Z"}`},
		{"volatile values differ",
			`{"amount":1000,"request_id":"r-1","timestamp":1}`,
			`{"amount":1000,"request_id":"r-2","timestamp":2}`},
		{"volatile nested in object",
			`{"payment":{"amount":1000}}`,
			`{"payment":{"amount":1000,"nonce":"n-1","trace_id":"t"}}`},
		{"volatile nested in array",
			`{"items":[{"sku":"A"},{"sku":"B"}]}`,
			`{"items":[{"sku":"A","client_timestamp":"x"},{"sku":"B","sent_at":{"deep":true}}]}`},
		{"volatile inside array of arrays",
			`[[{"sku":"A"}]]`,
			`[[{"sku":"A","request_id":"r"}]]`},
		{"whitespace-only is empty", ``, " \t\r\n"},
	}
	var f Fingerprinter
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := mustFingerprint(t, f, bodyRequest(tc.a))
			b := mustFingerprint(t, f, bodyRequest(tc.b))
			if a != b {
				t.Errorf("fingerprints differ:\n%s -> %s\n%s -> %s", tc.a, a, tc.b, b)
			}
		})
	}
}

func TestFingerprintDiffers(t *testing.T) {
	base := Request{
		Method:     "POST",
		Route:      "/v1/orders/{id}/pay",
		PathParams: map[string]string{"id": "ord_A"},
		Body:       []byte(`{"amount":1000,"currency":"EUR","sku":"SKU-1"}`),
	}
	tests := []struct {
		name   string
		modify func(r *Request)
	}{
		{"amount", func(r *Request) { r.Body = []byte(`{"amount":1001,"currency":"EUR","sku":"SKU-1"}`) }},
		{"sku", func(r *Request) { r.Body = []byte(`{"amount":1000,"currency":"EUR","sku":"SKU-2"}`) }},
		{"string case", func(r *Request) { r.Body = []byte(`{"amount":1000,"currency":"eur","sku":"SKU-1"}`) }},
		{"number vs string", func(r *Request) { r.Body = []byte(`{"amount":"1000","currency":"EUR","sku":"SKU-1"}`) }},
		{"empty object vs empty body", func(r *Request) { r.Body = []byte(`{}`) }},
		{"method", func(r *Request) { r.Method = "PUT" }},
		{"route", func(r *Request) { r.Route = "/v1/orders/{id}/refund" }},
		{"path param value", func(r *Request) { r.PathParams = map[string]string{"id": "ord_B"} }},
		{"path param name", func(r *Request) { r.PathParams = map[string]string{"order_id": "ord_A"} }},
		{"extra path param", func(r *Request) { r.PathParams = map[string]string{"id": "ord_A", "x": ""} }},
		{"no path params", func(r *Request) { r.PathParams = nil }},
	}
	var f Fingerprinter
	want := mustFingerprint(t, f, base)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := base
			tc.modify(&r)
			if got := mustFingerprint(t, f, r); got == want {
				t.Errorf("fingerprint of modified request equals the original's: %s", got)
			}
		})
	}
	t.Run("empty body vs empty object", func(t *testing.T) {
		if mustFingerprint(t, f, bodyRequest("")) == mustFingerprint(t, f, bodyRequest("{}")) {
			t.Error("empty body and {} have the same fingerprint")
		}
	})
}

func TestFingerprintMethodCase(t *testing.T) {
	var f Fingerprinter
	lower := mustFingerprint(t, f, Request{Method: "post", Route: "/v1/orders"})
	upper := mustFingerprint(t, f, Request{Method: "POST", Route: "/v1/orders"})
	if lower != upper {
		t.Errorf("method case changes the fingerprint: %s vs %s", lower, upper)
	}
}

// TestFingerprintLengthPrefix checks parts that would collide if they were
// simply concatenated.
func TestFingerprintLengthPrefix(t *testing.T) {
	pairs := []struct {
		name string
		a, b Request
	}{
		{"param name and value boundary",
			Request{Method: "POST", Route: "/r", PathParams: map[string]string{"ab": "c"}},
			Request{Method: "POST", Route: "/r", PathParams: map[string]string{"a": "bc"}}},
		{"two params vs one",
			Request{Method: "POST", Route: "/r", PathParams: map[string]string{"a": "b", "c": "d"}},
			Request{Method: "POST", Route: "/r", PathParams: map[string]string{"a": "bcd"}}},
		{"method and route boundary",
			Request{Method: "POST", Route: "/v1/x"},
			Request{Method: "POST/", Route: "v1/x"}},
		{"route and param boundary",
			Request{Method: "POST", Route: "/r/a", PathParams: map[string]string{"b": "c"}},
			Request{Method: "POST", Route: "/r", PathParams: map[string]string{"ab": "c"}}},
		{"param value and body boundary",
			Request{Method: "POST", Route: "/r", PathParams: map[string]string{"a": "1"}, Body: []byte(`2`)},
			Request{Method: "POST", Route: "/r", PathParams: map[string]string{"a": ""}, Body: []byte(`12`)}},
	}
	var f Fingerprinter
	for _, tc := range pairs {
		t.Run(tc.name, func(t *testing.T) {
			if mustFingerprint(t, f, tc.a) == mustFingerprint(t, f, tc.b) {
				t.Errorf("%+v and %+v have the same fingerprint", tc.a, tc.b)
			}
		})
	}
}

func TestFingerprintPathParamOrder(t *testing.T) {
	var f Fingerprinter
	params := map[string]string{"a": "1", "b": "2", "c": "3", "d": "4", "e": "5"}
	want := mustFingerprint(t, f, Request{Method: "POST", Route: "/r", PathParams: params})
	for i := 0; i < 20; i++ {
		if got := mustFingerprint(t, f, Request{Method: "POST", Route: "/r", PathParams: params}); got != want {
			t.Fatalf("fingerprint is not deterministic: %s vs %s", got, want)
		}
	}
}

func TestFingerprintVolatileFields(t *testing.T) {
	with := bodyRequest(`{"amount":1000,"request_id":"r-1"}`)
	without := bodyRequest(`{"amount":1000}`)

	t.Run("nil means defaults", func(t *testing.T) {
		f := Fingerprinter{VolatileFields: nil}
		if mustFingerprint(t, f, with) != mustFingerprint(t, f, without) {
			t.Error("request_id is not removed by the zero Fingerprinter")
		}
	})
	t.Run("empty non-nil strips nothing", func(t *testing.T) {
		f := Fingerprinter{VolatileFields: []string{}}
		if mustFingerprint(t, f, with) == mustFingerprint(t, f, without) {
			t.Error("request_id is removed although VolatileFields is empty")
		}
	})
	t.Run("custom list", func(t *testing.T) {
		f := Fingerprinter{VolatileFields: []string{"idempotency_hint"}}
		if mustFingerprint(t, f, with) == mustFingerprint(t, f, without) {
			t.Error("request_id is removed although not in VolatileFields")
		}
		a := mustFingerprint(t, f, bodyRequest(`{"amount":1000,"x":{"idempotency_hint":"h"}}`))
		b := mustFingerprint(t, f, bodyRequest(`{"amount":1000,"x":{}}`))
		if a != b {
			t.Error("custom volatile field is not removed")
		}
	})
	t.Run("names match exactly", func(t *testing.T) {
		var f Fingerprinter
		if mustFingerprint(t, f, bodyRequest(`{"amount":1000,"Request_ID":"r"}`)) == mustFingerprint(t, f, without) {
			t.Error("member name matching ignores case")
		}
	})
}

func TestFingerprintInvalidBody(t *testing.T) {
	bodies := []string{
		`{"amount":`,
		`{"amount":1000}x`,
		`{"amount":1000}{}`,
		`{amount:1000}`,
		`{"a":1,"a":2}`,
		`{"amount":1e400}`,
		`{"s":"\ud800"}`,
		"{\"s\":\"\xff\"}",
		`NaN`,
		"\x00",
	}
	for _, fields := range [][]string{nil, {}} {
		f := Fingerprinter{VolatileFields: fields}
		for _, body := range bodies {
			fp, err := f.Fingerprint(bodyRequest(body))
			if err == nil {
				t.Errorf("Fingerprint(%q) = %s, want error", body, fp)
				continue
			}
			var e *apperr.Error
			if !errors.As(err, &e) || e.Code != apperr.EInvalid || e.Message != "request body is not valid JSON" {
				t.Errorf("Fingerprint(%q) error = %#v, want EInvalid %q", body, err, "request body is not valid JSON")
			}
		}
	}
}

var hex64 = regexp.MustCompile(`^[0-9a-f]{64}$`)

func TestFingerprintFormat(t *testing.T) {
	var f Fingerprinter
	for _, body := range []string{"", "{}", fingerprintSeeds[0]} {
		fp := mustFingerprint(t, f, Request{Method: "POST", Route: "/v1/orders/{id}/pay", PathParams: map[string]string{"id": "ord_1"}, Body: []byte(body)})
		if !hex64.MatchString(fp) {
			t.Errorf("fingerprint %q is not 64 lowercase hex characters", fp)
		}
	}
}

func TestDerivedKey(t *testing.T) {
	fp := mustFingerprint(t, Fingerprinter{}, bodyRequest(`{}`))
	if got, want := DerivedKey(fp), "derived:"+fp; got != want {
		t.Errorf("DerivedKey = %q, want %q", got, want)
	}
	if _, err := ParseKey(DerivedKey(fp)); err != nil {
		t.Errorf("DerivedKey is not a valid key: %v", err)
	}
}
