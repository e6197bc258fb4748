package check

import "testing"

// TestSummarizeRequiresEveryCheck: an invariant whose check did not run is
// "not run", and with requireAll an anomaly that fails the run; the ledger
// totals are checked beside the per-order checks.
func TestSummarizeRequiresEveryCheck(t *testing.T) {
	base := func() Report {
		return Report{ByKind: map[string]int{}, LogicalCreates: 2, AckedCreates: 2, DBOrders: 2, KeysChecked: 4,
			DBStates: map[string]int{"PAID": 1, "FULFILLED": 1}, LedgerChecked: true, RunCaptures: 2, RunShipments: 1,
			RunCaptured: 300, PaidAmount: 300}
	}
	status := func(rep Report) map[string]string {
		out := map[string]string{}
		for _, iv := range rep.Invariants {
			out[iv.Name] = iv.Status
		}
		return out
	}

	rep := base()
	Summarize(&rep, Inputs{}, false)
	st := status(rep)
	if rep.Total != 0 || st["captures vs paid orders"] != StatusOK || st["deliveries per event"] != StatusNotRun ||
		st["bus commands took effect once"] != StatusNotRun || st["provider webhooks in"] != StatusNotRun {
		t.Fatalf("without requireAll: %d anomalies %v, statuses %v", rep.Total, rep.Anomalies, st)
	}

	rep = base()
	Summarize(&rep, Inputs{}, true)
	for _, name := range []string{"events per change", "deliveries per event", "bus commands took effect once",
		"reads see acknowledged writes", "provider webhooks in"} {
		found := false
		for _, a := range rep.Anomalies {
			found = found || (a.Kind == AnomalyHarnessUnreachable && a.Ref == name)
		}
		if !found {
			t.Errorf("requireAll: %q did not run and no check_incomplete names it: %v", name, rep.Anomalies)
		}
	}
	if st := status(rep); st["the checks ran"] != StatusFailed {
		t.Errorf("the not-run checks are not a failed row: %v", st)
	}

	rep = base()
	rep.RunShipments = 2 // one shipment more than FULFILLED orders
	rep.RunCaptured = 400
	all := &WebhookReport{Changes: 5, Events: 5, Delivered: 5}
	Summarize(&rep, Inputs{Webhooks: all, Bus: &BusReport{Commands: 1, ReadBack: 1}, Reads: &ReadReport{WithToken: 1},
		ProviderEvents: 1, ProviderDelivered: 1}, true)
	st = status(rep)
	if rep.ByKind[AnomalyDoubleShipment] != 1 || rep.ByKind[AnomalyMoney] != 1 || rep.ByKind[AnomalyHarnessUnreachable] != 0 ||
		st["shipments vs fulfilled orders"] != StatusFailed || st["captures vs paid orders"] != StatusFailed || st["events per change"] != StatusOK {
		t.Errorf("ledger totals: %v, statuses %v", rep.ByKind, st)
	}
}
