package check

import (
	"fmt"
	"sort"
)

// Invariant statuses.
const (
	StatusOK     = "ok"
	StatusFailed = "FAIL"
	StatusNotRun = "not run"
)

// Invariant is one promise the run checked, with the counts it rests on.
type Invariant struct {
	// Name names the promise ("captures vs paid orders", ...).
	Name string `json:"name"`
	// Counts are the figures compared, in words.
	Counts string `json:"counts"`
	// Anomalies counts the anomalies of the kinds that break it.
	Anomalies int `json:"anomalies"`
	// Kinds are those kinds with their counts, where any.
	Kinds map[string]int `json:"kinds,omitempty"`
	// Status is ok, FAIL (anomalies), or "not run" (what it needs was not
	// configured, or its check failed: a check_incomplete anomaly says why).
	Status string `json:"status"`
}

// Anomaly kinds of the reads that follow acknowledged writes.
const (
	AnomalyReadStale = "stale_read_with_token" // a GET with a write's consistency token showed an older version (or failed)
	AnomalyReadLost  = "read_not_found"        // a GET of an acknowledged order answered 404
)

// ReadReport counts the reads that followed acknowledged writes.
type ReadReport struct {
	WithToken    int64 `json:"with_token"`
	WithoutToken int64 `json:"without_token"`
	StaleAllowed int64 `json:"stale_without_token"`
	Unanswered   int64 `json:"unanswered"`
}

// Inputs of Summarize beyond the Report: what the other checks saw, nil
// when they did not run.
type Inputs struct {
	Webhooks *WebhookReport
	Bus      *BusReport
	Reads    *ReadReport
	// ProviderWebhooks is how many webhooks the provider sent orderd and
	// how many it delivered (-1, -1 if it sent none: not configured).
	ProviderEvents, ProviderDelivered int64
}

// invariantKinds names the anomaly kinds that break each invariant, in the
// order the summary lists them.
var invariantKinds = []struct {
	name  string
	kinds []string
}{
	{"one order per logical create", []string{AnomalyDuplicateOrder, AnomalyLostOrder, AnomalyWrongOrder, AnomalyPhantomOrder}},
	{"every operation answered, keys agree", []string{AnomalyUnresolved, AnomalyUnexpectedStatus, AnomalyKeyRecord,
		AnomalyAckedStateLost, AnomalyPhantomTransition, AnomalyAttemptNotSettled, AnomalyStateAttempts, AnomalyInternalError}},
	{"replays equal and byte-identical", []string{AnomalyReplayMismatch, AnomalyReplayNotFlagged, AnomalyDoubleExecution, AnomalyReplayBytes}},
	{"captures vs paid orders", []string{AnomalyDoubleCapture, AnomalyAttemptLedger, AnomalyMoney, AnomalyStateLedger, AnomalyPaidNoCapture}},
	{"shipments vs fulfilled orders", []string{AnomalyDoubleShipment, AnomalyShipNotFulfilled}},
	{"refunds vs cancelled paid orders", []string{AnomalyRefundNoCapture, AnomalyRefundTotals}},
	{"events per change", []string{AnomalyEventMissing, AnomalyEventPhantom}},
	{"deliveries per event", []string{AnomalyWebhookMissing, AnomalyWebhookPhantom, AnomalyWebhookSignature,
		AnomalyWebhookOutOfOrder, AnomalyWebhookState}},
	{"bus commands took effect once", []string{AnomalyBusNotApplied, AnomalyDeclineEffects, AnomalyBusNotDrained}},
	{"reads see acknowledged writes", []string{AnomalyReadStale, AnomalyReadLost}},
	{"provider webhooks in", nil},
}

// Summarize fills rep.Invariants: each promise with its counts, its
// anomalies and whether it ran. With requireAll, a promise that did not
// run is itself an anomaly (check_incomplete), so the run fails.
func Summarize(rep *Report, in Inputs, requireAll bool) {
	st := rep.DBStates
	paid := st["PAID"] + st["FULFILLED"]
	if rep.CaptureAtFulfilment {
		paid = st["FULFILLED"] // PAID orders are only authorized
	}
	counts := map[string]string{
		"one order per logical create": fmt.Sprintf("%d logical creates (%d acknowledged), %d orders in the database",
			rep.LogicalCreates, rep.AckedCreates, rep.DBOrders),
		"every operation answered, keys agree": fmt.Sprintf("%d keys checked against their answers, %d provider attempts",
			rep.KeysChecked, rep.AttemptsChecked),
		"replays equal and byte-identical": fmt.Sprintf("%d replays answered; %d compared byte for byte with the original", rep.Replays, rep.ReplaysCompared),
	}
	ran := map[string]bool{"one order per logical create": rep.DBOrders > 0 || rep.LogicalCreates == 0,
		"every operation answered, keys agree": true, "replays equal and byte-identical": true}
	if rep.LedgerChecked {
		counts["captures vs paid orders"] = fmt.Sprintf("%d captures − %d captured CANCELLED orders = %d; orders holding money %d; money: %d captured − %d refunded = %d, orders' amount %d − %d partially refunded = %d (minor units)",
			rep.RunCaptures, rep.CancelledPaid, rep.RunCaptures-rep.CancelledPaid, paid,
			rep.RunCaptured, rep.RunRefunded, rep.RunCaptured-rep.RunRefunded, rep.PaidAmount, rep.PaidRefunded, rep.PaidAmount-rep.PaidRefunded)
		counts["shipments vs fulfilled orders"] = fmt.Sprintf("%d shipments, %d FULFILLED orders", rep.RunShipments, st["FULFILLED"])
		counts["refunds vs cancelled paid orders"] = fmt.Sprintf("%d refunds: %d partial refunds, %d CANCELLED orders that were captured", rep.RunRefunds, rep.PartialRefunds, rep.CancelledPaid)
		ran["captures vs paid orders"], ran["shipments vs fulfilled orders"], ran["refunds vs cancelled paid orders"] = true, true, true
		// The totals, beside the per-order checks that imply them.
		if rep.RunCaptures-rep.CancelledPaid != paid || rep.RunCaptured-rep.RunRefunded != rep.PaidAmount-rep.PaidRefunded {
			rep.Add(AnomalyMoney, "-", "ledger totals: %d captures − %d captured CANCELLED orders for %d PAID+FULFILLED orders; %d − %d minor units for %d − %d",
				rep.RunCaptures, rep.CancelledPaid, paid, rep.RunCaptured, rep.RunRefunded, rep.PaidAmount, rep.PaidRefunded)
		}
		if rep.RunShipments != st["FULFILLED"] {
			rep.Add(AnomalyDoubleShipment, "-", "ledger totals: %d shipments for %d FULFILLED orders", rep.RunShipments, st["FULFILLED"])
		}
		if rep.RunRefunds < rep.PartialRefunds || rep.RunRefunds > rep.PartialRefunds+rep.CancelledPaid {
			rep.Add(AnomalyRefundNoCapture, "-", "ledger totals: %d refunds for %d partial refunds and %d captured CANCELLED orders",
				rep.RunRefunds, rep.PartialRefunds, rep.CancelledPaid)
		}
	}
	if w := in.Webhooks; w != nil {
		counts["events per change"] = fmt.Sprintf("%d changes (sum of order versions), %d events in the outbox", w.Changes, w.Events)
		counts["deliveries per event"] = fmt.Sprintf("%d of %d events delivered (%d deliveries, %d redeliveries)", w.Delivered, w.Events, w.Deliveries, w.Redelivery)
		ran["events per change"], ran["deliveries per event"] = true, true
	}
	if b := in.Bus; b != nil {
		counts["bus commands took effect once"] = fmt.Sprintf("%d commands, %d read back as replays, %d raced by an HTTP twin; %d declined keys, %d payment_failed events",
			b.Commands, b.ReadBack, b.Twinned, b.DeclinedKeys, b.DeclineEvents)
		ran["bus commands took effect once"] = b.Commands > 0
	}
	if r := in.Reads; r != nil {
		counts["reads see acknowledged writes"] = fmt.Sprintf("%d GETs with the write's consistency token, none older; %d without (%d showed an older version: allowed), %d unanswered",
			r.WithToken, r.WithoutToken, r.StaleAllowed, r.Unanswered)
		ran["reads see acknowledged writes"] = r.WithToken+r.WithoutToken > 0
	}
	if in.ProviderEvents > 0 {
		counts["provider webhooks in"] = fmt.Sprintf("%d sent by the provider, %d delivered (duplicates, reorders and drops included); their effects are in the ledger and state checks",
			in.ProviderEvents, in.ProviderDelivered)
		ran["provider webhooks in"] = in.ProviderDelivered > 0
	}

	rep.Invariants = rep.Invariants[:0]
	claimed := map[string]bool{}
	for _, iv := range invariantKinds {
		inv := Invariant{Name: iv.name, Counts: counts[iv.name], Status: StatusOK}
		for _, k := range iv.kinds {
			claimed[k] = true
			if n := rep.ByKind[k]; n > 0 {
				if inv.Kinds == nil {
					inv.Kinds = map[string]int{}
				}
				inv.Kinds[k] = n
				inv.Anomalies += n
			}
		}
		switch {
		case inv.Anomalies > 0:
			inv.Status = StatusFailed
		case !ran[iv.name]:
			inv.Status = StatusNotRun
			if inv.Counts == "" {
				inv.Counts = "not configured in this run"
			}
			if requireAll {
				rep.Add(AnomalyHarnessUnreachable, iv.name, "the check did not run: %s", inv.Counts)
			}
		}
		rep.Invariants = append(rep.Invariants, inv)
	}
	// Anything else (a check that could not run, ...).
	var other []string
	for k := range rep.ByKind {
		if !claimed[k] {
			other = append(other, k)
		}
	}
	sort.Strings(other)
	if len(other) > 0 {
		inv := Invariant{Name: "the checks ran", Status: StatusFailed, Kinds: map[string]int{}}
		for _, k := range other {
			inv.Kinds[k] = rep.ByKind[k]
			inv.Anomalies += rep.ByKind[k]
		}
		inv.Counts = fmt.Sprintf("%d anomalies of other kinds", inv.Anomalies)
		rep.Invariants = append(rep.Invariants, inv)
	}
}
