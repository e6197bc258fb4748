package paysim

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// FaultHeader is the request header that injects faults into one request:
// a comma-separated list of at most one of "drop-after-commit", "error",
// "timeout" and "decline", and optionally "latency=<duration>", such as
// "latency=250ms, drop-after-commit".
const FaultHeader = "Paysim-Fault"

// FaultKind names an injected fault; the keys of Stats.FaultsInjected.
type FaultKind string

// Fault kinds.
const (
	// FaultLatency delays the answer; it never changes the outcome.
	FaultLatency FaultKind = "latency"
	// FaultError answers 503 and commits nothing.
	FaultError FaultKind = "error"
	// FaultTimeout holds the request for the timeout delay, or until the
	// client goes away or the server shuts down, then answers 504 if the
	// client is still there. It commits nothing.
	FaultTimeout FaultKind = "timeout"
	// FaultDrop commits the outcome, then closes the connection without
	// answering. On a lookup it drops the reply.
	FaultDrop FaultKind = "drop"
	// FaultDecline declines a new charge with DeclineCardDeclined and
	// remembers the decline under the key. It applies to charges only.
	FaultDecline FaultKind = "decline"
)

// faultKinds lists every kind, in the order Stats reports them.
var faultKinds = []FaultKind{FaultLatency, FaultError, FaultTimeout, FaultDrop, FaultDecline}

// Bounds and defaults of Faults.
const (
	// DefaultTimeoutDelay is the TimeoutDelay used when it is zero.
	DefaultTimeoutDelay = 30 * time.Second
	// MaxDelay bounds Latency, TimeoutDelay and a header's latency.
	MaxDelay = 5 * time.Minute
)

// Faults are the run-level fault settings, set at start and replaced with
// PUT /admin/faults. The zero value injects nothing.
//
// Run-level faults apply only to POST requests whose idempotency key holds
// no outcome yet; a replay, a lookup (GET) and the admin endpoints are
// answered normally, except that Latency delays replays and lookups too. For
// such a request one uniform draw r in [0, 1) from the seeded source picks
// at most one fault: error if r < ErrorRate, else timeout if r < ErrorRate +
// TimeoutRate, else drop if r < … + DropRate, else decline if r < … +
// DeclineRate (charges only). The rates must therefore sum to at most 1.
//
// In JSON, durations are strings such as "250ms".
type Faults struct {
	// Latency is added to every /v1/ request.
	Latency time.Duration
	// ErrorRate is the fraction of new requests answered 503, committing
	// nothing.
	ErrorRate float64
	// DeclineRate is the fraction of new charges declined (card_declined).
	DeclineRate float64
	// TimeoutRate is the fraction of new requests that time out (see
	// FaultTimeout), committing nothing.
	TimeoutRate float64
	// TimeoutDelay is how long a timeout fault holds the request; zero
	// means DefaultTimeoutDelay.
	TimeoutDelay time.Duration
	// DropRate is the fraction of new requests whose outcome is committed
	// and whose reply is dropped.
	DropRate float64
	// Seed seeds the math/rand/v2 PCG source of the draws; setting the
	// faults (at start or with PUT) restarts the sequence, so a run with a
	// given seed and sequential requests injects the same faults.
	Seed uint64
}

// Validate reports whether f is usable: rates in [0, 1] summing to at most
// 1, delays in [0, MaxDelay].
func (f Faults) Validate() error {
	rates := []struct {
		name string
		v    float64
	}{{"error_rate", f.ErrorRate}, {"decline_rate", f.DeclineRate}, {"timeout_rate", f.TimeoutRate}, {"drop_rate", f.DropRate}}
	sum := 0.0
	for _, r := range rates {
		if !(r.v >= 0 && r.v <= 1) { // also rejects NaN
			return fmt.Errorf("%s must be in [0, 1], not %v", r.name, r.v)
		}
		sum += r.v
	}
	if sum > 1+1e-9 {
		return fmt.Errorf("error_rate + decline_rate + timeout_rate + drop_rate must be at most 1, not %v", sum)
	}
	if f.Latency < 0 || f.Latency > MaxDelay {
		return fmt.Errorf("latency must be in [0, %s], not %s", MaxDelay, f.Latency)
	}
	if f.TimeoutDelay < 0 || f.TimeoutDelay > MaxDelay {
		return fmt.Errorf("timeout_delay must be in [0, %s], not %s", MaxDelay, f.TimeoutDelay)
	}
	return nil
}

// timeoutDelay returns TimeoutDelay or its default.
func (f Faults) timeoutDelay() time.Duration {
	if f.TimeoutDelay == 0 {
		return DefaultTimeoutDelay
	}
	return f.TimeoutDelay
}

// faultsJSON is the wire form of Faults.
type faultsJSON struct {
	Latency      string  `json:"latency"`
	ErrorRate    float64 `json:"error_rate"`
	DeclineRate  float64 `json:"decline_rate"`
	TimeoutRate  float64 `json:"timeout_rate"`
	TimeoutDelay string  `json:"timeout_delay"`
	DropRate     float64 `json:"drop_rate"`
	Seed         uint64  `json:"seed"`
}

// MarshalJSON implements json.Marshaler, writing durations as strings.
func (f Faults) MarshalJSON() ([]byte, error) {
	return json.Marshal(faultsJSON{
		Latency: f.Latency.String(), ErrorRate: f.ErrorRate, DeclineRate: f.DeclineRate,
		TimeoutRate: f.TimeoutRate, TimeoutDelay: f.timeoutDelay().String(), DropRate: f.DropRate, Seed: f.Seed,
	})
}

// UnmarshalJSON implements json.Unmarshaler. Durations are strings parsed
// by time.ParseDuration; missing members are zero. Unknown members are an
// error.
func (f *Faults) UnmarshalJSON(b []byte) error {
	var w faultsJSON
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&w); err != nil {
		return err
	}
	var out Faults
	var err error
	if out.Latency, err = parseDuration("latency", w.Latency); err != nil {
		return err
	}
	if out.TimeoutDelay, err = parseDuration("timeout_delay", w.TimeoutDelay); err != nil {
		return err
	}
	out.ErrorRate, out.DeclineRate, out.TimeoutRate, out.DropRate, out.Seed = w.ErrorRate, w.DeclineRate, w.TimeoutRate, w.DropRate, w.Seed
	*f = out
	return nil
}

func parseDuration(name, s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", name, err)
	}
	return d, nil
}

// requestFaults are the faults one request asks for in FaultHeader.
type requestFaults struct {
	kind    FaultKind // "" for none
	latency time.Duration
}

// parseFaultHeader parses a FaultHeader value.
func parseFaultHeader(v string) (requestFaults, error) {
	var rf requestFaults
	for tok := range strings.SplitSeq(v, ",") {
		tok = strings.TrimSpace(tok)
		var kind FaultKind
		switch {
		case tok == "":
			continue
		case strings.HasPrefix(tok, "latency="):
			d, err := time.ParseDuration(strings.TrimPrefix(tok, "latency="))
			if err != nil || d < 0 || d > MaxDelay {
				return rf, fmt.Errorf("%s: %q is not a duration in [0, %s]", FaultHeader, tok, MaxDelay)
			}
			rf.latency += d
			continue
		case tok == "drop-after-commit" || tok == "drop":
			kind = FaultDrop
		case tok == "error" || tok == "503":
			kind = FaultError
		case tok == "timeout":
			kind = FaultTimeout
		case tok == "decline":
			kind = FaultDecline
		default:
			return rf, fmt.Errorf("%s: unknown fault %q; want drop-after-commit, error, timeout, decline or latency=<duration>", FaultHeader, tok)
		}
		if rf.kind != "" && rf.kind != kind {
			return rf, errors.New(FaultHeader + ": at most one of drop-after-commit, error, timeout and decline")
		}
		rf.kind = kind
	}
	if rf.latency > MaxDelay {
		return rf, fmt.Errorf("%s: total latency above %s", FaultHeader, MaxDelay)
	}
	return rf, nil
}

// triggered maps the test payment methods and SKUs to their one-shot
// faults.
var triggered = map[string]FaultKind{
	MethodFaultDropAfterCommit: FaultDrop,
	MethodFault503:             FaultError,
	MethodFaultTimeout:         FaultTimeout,
	SKUFaultDropAfterCommit:    FaultDrop,
	SKUFault503:                FaultError,
	SKUFaultTimeout:            FaultTimeout,
}
