package idempotency

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/gowebpki/jcs"
)

// FuzzFingerprint checks Fingerprint's invariants on arbitrary bodies: it never
// panics; when it succeeds, the fingerprint equals that of the RFC 8785 form of
// the body (as produced by the jcs library directly, and of the stripped body),
// extra surrounding whitespace does not change it, and adding volatile members
// to an object body does not change it.
func FuzzFingerprint(f *testing.F) {
	for _, body := range fingerprintSeeds {
		f.Add([]byte(body))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var def Fingerprinter
		fp, err := def.Fingerprint(bodyRequest(string(body)))
		if err != nil {
			return
		}
		if !hex64.MatchString(fp) {
			t.Fatalf("fingerprint %q is not 64 lowercase hex characters", fp)
		}

		// The canonical stripped body fingerprints the same.
		stripped, err := def.canonicalBody(body)
		if err != nil {
			t.Fatalf("canonicalBody error after Fingerprint succeeded: %v", err)
		}
		if got := mustFingerprint(t, def, bodyRequest(string(stripped))); got != fp {
			t.Fatalf("canonical stripped body %q fingerprints %s, original %q fingerprints %s", stripped, got, body, fp)
		}

		// Surrounding whitespace does not matter.
		wrapped := append(append([]byte(" \n"), body...), '\t')
		if got := mustFingerprint(t, def, bodyRequest(string(wrapped))); got != fp {
			t.Fatalf("whitespace-wrapped body fingerprints %s, original %s", got, fp)
		}

		// With nothing stripped, the library's own canonical form fingerprints
		// the same as the body.
		none := Fingerprinter{VolatileFields: []string{}}
		fpNone := mustFingerprint(t, none, bodyRequest(string(body)))
		if trimmed := bytes.Trim(body, jsonWhitespace); len(trimmed) > 0 {
			canonical, err := jcs.Transform(trimmed)
			if err != nil {
				t.Fatalf("jcs.Transform(%q) error after Fingerprint succeeded: %v", trimmed, err)
			}
			if got := mustFingerprint(t, none, bodyRequest(string(canonical))); got != fpNone {
				t.Fatalf("jcs form %q fingerprints %s, original %q fingerprints %s", canonical, got, body, fpNone)
			}
		}

		// Adding volatile members to an object body, at the top and one level
		// down, does not change the fingerprint.
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.UseNumber()
		var obj map[string]any
		if dec.Decode(&obj) != nil || obj == nil {
			return
		}
		obj["request_id"] = "r-" + fp[:8]
		obj["timestamp"] = json.Number("1735689600")
		for _, v := range obj {
			if inner, ok := v.(map[string]any); ok {
				inner["nonce"] = "n-1"
				inner["trace_id"] = []any{"t", json.Number("1")}
			}
		}
		noisy, err := json.Marshal(obj)
		if err != nil {
			t.Fatalf("json.Marshal: %v", err)
		}
		if got := mustFingerprint(t, def, bodyRequest(string(noisy))); got != fp {
			t.Fatalf("body with volatile members %s fingerprints %s, original %q fingerprints %s", noisy, got, body, fp)
		}
	})
}
