package idempotency

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/gowebpki/jcs"
)

// The pre-Parse implementation (main before issue 19), kept verbatim as the
// reference that Parse must agree with byte for byte: a key stored before
// carries a fingerprint it computed, and must still replay.

// refVolatileSet returns the set of member names f removes from a body.
func refVolatileSet(f Fingerprinter) map[string]struct{} {
	fields := f.VolatileFields
	if fields == nil {
		fields = DefaultVolatileFields
	}
	set := make(map[string]struct{}, len(fields))
	for _, name := range fields {
		set[name] = struct{}{}
	}
	return set
}

// refCanonicalBody is the former canonicalBody.
func refCanonicalBody(f Fingerprinter, body []byte) ([]byte, error) {
	body = bytes.Trim(body, jsonWhitespace)
	if len(body) == 0 {
		return []byte{}, nil
	}
	canonical, err := jcs.Transform(body)
	if err != nil {
		return nil, errBodyNotJSON()
	}
	volatile := refVolatileSet(f)
	if len(volatile) == 0 {
		return canonical, nil
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, errBodyNotJSON()
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errBodyNotJSON()
	}
	if !refStripMembers(v, volatile) {
		return canonical, nil
	}
	stripped, err := json.Marshal(v)
	if err != nil {
		return nil, errBodyNotJSON()
	}
	canonical, err = jcs.Transform(stripped)
	if err != nil {
		return nil, errBodyNotJSON()
	}
	return canonical, nil
}

// refStripVolatile is the former StripVolatile.
func refStripVolatile(f Fingerprinter, body []byte) []byte {
	volatile := refVolatileSet(f)
	if len(volatile) == 0 {
		return body
	}
	if _, err := jcs.Transform(bytes.Trim(body, jsonWhitespace)); err != nil {
		return body
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil || !refStripMembers(v, volatile) {
		return body
	}
	stripped, err := json.Marshal(v)
	if err != nil {
		return body
	}
	return stripped
}

// refStripMembers is the former stripMembers.
func refStripMembers(v any, names map[string]struct{}) bool {
	removed := false
	switch v := v.(type) {
	case map[string]any:
		for name, child := range v {
			if _, ok := names[name]; ok {
				delete(v, name)
				removed = true
				continue
			}
			if refStripMembers(child, names) {
				removed = true
			}
		}
	case []any:
		for _, child := range v {
			if refStripMembers(child, names) {
				removed = true
			}
		}
	}
	return removed
}

// parseSeeds adds to fingerprintSeeds bodies that exercise the one-pass
// parser's edges: volatile members at depth, in arrays, holding objects,
// invalid values inside volatile members, escapes, whitespace, numbers
// spelled several ways, trailing data.
var parseSeeds = []string{
	`{"customer_id":"cus_bench_0001","currency":"EUR","client_timestamp":"2026-12-02T05:00:00Z","items":[{"sku":"SKU-RED-SHIRT","quantity":2,"unit_price":1999}]}`,
	` { "b" : 1 , "nonce" : { "x" : [ 1 , 2 ] } , "a" : [ { "trace_id" : 1 , "k" : 2.50 } ] } `,
	`{"nonce":{"a":1,"a":2},"x":1}`,
	`{"nonce":1e400,"x":1}`,
	`{"nonce":"\ud800","x":1}`,
	`{"x":"\ud83d\ude00 \u00e9 \/ \"q\" \\ \b\f\n\r\t \u001f","timestamp":0}`,
	`{"x":1e2,"y":-0,"z":1.0E+2,"w":0.000001,"v":1e21,"request_id":null}`,
	`{"x":1} {"y":2}`,
	`{"x":1,"nonce":2}x`,
	`[{"nonce":1},{"sent_at":2,"k":[{"nonce":3}]}]`,
	`{"\u006eonce":1,"x":2}`,
	`{"items":[],"nonce":[]}`,
	`"nonce"`,
	`123`,
	`{"x":01}`,
	`{"nonce":01}`,
	"{\"x\":\"\xff\"}",
	`{"x":[1,2,,3]}`,
	`{"nonce":1,}`,
	`{"k":9007199254740993,"nonce":"a"}`,
	`{"x":"\ud800","nonce":1}`,
	`{"x":"\udc00\ud800","nonce":1}`,
	`{"x":"\ud83d\ude00\u2028\u2029\u007f\u0080","nonce":1}`,
	`{"x":[1e-400,5e-324,1.7976931348623157e308,1.7976931348623159e308],"nonce":1}`,
	`{"x":[0.1,100,1e20,1e21,123456789012345680000,0.000001,1e-7,-0.0,4.35,2.5e-5],"nonce":1}`,
	`{"\u00e9":1,"e":2,"\ud83d\ude00":3,"\uff61":4,"nonce":1}`,
	`{"x":"\u0041\/\t\u0000","nonce":1}`,
}

// TestParseAgreesAtTheNestingLimit compares Parse with the reference at
// and around the nesting depth both parsers bound (10 000).
func TestParseAgreesAtTheNestingLimit(t *testing.T) {
	for _, depth := range []int{9999, 10000, 10001} {
		body := `{"nonce":1,"x":` + strings.Repeat("[", depth) + strings.Repeat("]", depth) + `}`
		checkAgainstReference(t, Fingerprinter{}, []byte(body))
	}
}

// checkAgainstReference fails t unless Parse agrees with the reference for
// body under f: the same validity, the same canonical bytes, and a Decode
// that means what the reference's stripped body means.
func checkAgainstReference(t *testing.T, f Fingerprinter, body []byte) {
	t.Helper()
	want, wantErr := refCanonicalBody(f, body)
	b := f.Parse(body)
	got, gotErr := f.canonicalBody(body)
	if (wantErr != nil) != (gotErr != nil) {
		t.Fatalf("body %q: reference error %v, Parse error %v", body, wantErr, gotErr)
	}
	if !bytes.Equal(want, got) {
		t.Fatalf("body %q: reference canonical %q, Parse %q", body, want, got)
	}
	if wantErr != nil {
		if !bytes.Equal(b.Decode, body) {
			t.Fatalf("invalid body %q: Decode %q, want the body unchanged", body, b.Decode)
		}
		return
	}
	// The reference's stripped body and Decode are the same JSON value
	// (the reference re-encoded it with encoding/json; Parse copies it).
	refDecode := refStripVolatile(f, body)
	cr, err1 := jcs.Transform(bytes.Trim(refDecode, jsonWhitespace))
	cp, err2 := jcs.Transform(bytes.Trim(b.Decode, jsonWhitespace))
	if len(bytes.Trim(refDecode, jsonWhitespace)) == 0 {
		cr, err1 = nil, nil
		cp, err2 = nil, nil
	}
	if err1 != nil || err2 != nil || !bytes.Equal(cr, cp) {
		t.Fatalf("body %q: reference decodes %q, Parse %q (%v, %v)", body, refDecode, b.Decode, err1, err2)
	}
}

// TestParseAgreesWithReference proves that the one-pass Parse yields the
// same fingerprint validity and canonical bytes as the implementation it
// replaced, for the default, a custom and an empty set of volatile fields.
func TestParseAgreesWithReference(t *testing.T) {
	for _, f := range []Fingerprinter{{}, {VolatileFields: []string{"x", "k"}}, {VolatileFields: []string{}}} {
		for _, body := range append(append([]string{}, fingerprintSeeds...), parseSeeds...) {
			checkAgainstReference(t, f, []byte(body))
		}
	}
}

// TestFingerprintsStoredBefore pins fingerprints computed by the
// implementation before Parse (main at 876fc0b): keys stored with them, and
// derived keys ("derived:" + fingerprint), must still match and replay.
func TestFingerprintsStoredBefore(t *testing.T) {
	for _, tc := range []struct {
		route, body string
		params      map[string]string
	}{
		{"/v1/orders", parseSeeds[0], nil},
		{"/v1/orders", fingerprintSeeds[0], nil},
		{"/v1/orders/{id}/pay", `{"amount":1999,"currency":"EUR","payment_method":"pm_card_visa","nonce":"n1"}`, map[string]string{"id": "ord_1"}},
		{"/v1/orders/{id}/cancel", `{}`, map[string]string{"id": "ord_1"}},
		{"/v1/orders", parseSeeds[1], nil},
	} {
		got, err := Fingerprinter{}.Fingerprint(Request{Method: "POST", Route: tc.route, PathParams: tc.params, Body: []byte(tc.body)})
		if err != nil {
			t.Fatal(err)
		}
		if got != goldenFingerprints[tc.body+"|"+tc.route] {
			t.Errorf("Fingerprint(%s %s) = %s, want %s (as stored before)", tc.route, tc.body, got, goldenFingerprints[tc.body+"|"+tc.route])
		}
	}
}

// FuzzParse checks Parse against the reference implementation on
// arbitrary bodies.
func FuzzParse(f *testing.F) {
	for _, body := range append(append([]string{}, fingerprintSeeds...), parseSeeds...) {
		f.Add([]byte(body))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		checkAgainstReference(t, Fingerprinter{}, body)
	})
}

// goldenFingerprints are the fingerprints main computed at 876fc0b (before
// Parse), by body and route.
var goldenFingerprints = map[string]string{
	"{\"customer_id\":\"cus_bench_0001\",\"currency\":\"EUR\",\"client_timestamp\":\"2026-12-02T05:00:00Z\",\"items\":[{\"sku\":\"SKU-RED-SHIRT\",\"quantity\":2,\"unit_price\":1999}]}|/v1/orders": "76fade9e3c52561e2044bdf119329c1c577a83299c5e802dd0df41bc6d3a3354",
	"{\"customer_id\":\"cus_42\",\"currency\":\"EUR\",\"items\":[{\"sku\":\"SKU-1\",\"quantity\":2,\"unit_price\":1000},{\"sku\":\"SKU-2\",\"quantity\":1,\"unit_price\":2599}]}|/v1/orders":        "f35ef65e99cd5c2b58fa259c506fcd4da23786e9f9e2f0c2b505aedba194f620",
	"{\"amount\":1999,\"currency\":\"EUR\",\"payment_method\":\"pm_card_visa\",\"nonce\":\"n1\"}|/v1/orders/{id}/pay":                                                                               "d1a185ea09e4749435d6a3ef3c0056928ebdf7a2d8467ba1aa2521e8102c94c5",
	"{}|/v1/orders/{id}/cancel": "771194a08aed629bfdbecd9fb806727203cdd514b40397db2d7bb7ca05e99d53",
	" { \"b\" : 1 , \"nonce\" : { \"x\" : [ 1 , 2 ] } , \"a\" : [ { \"trace_id\" : 1 , \"k\" : 2.50 } ] } |/v1/orders": "43690dc623a4484c556feaedd8e9ba6ba171216ccf0355e3789d62b0bf1e4c0d",
}
