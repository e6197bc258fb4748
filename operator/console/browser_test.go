package console_test

import (
	"context"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/orderly/orderly/event"
	"github.com/orderly/orderly/internal/testenv"
	"github.com/orderly/orderly/operator/console"
	"github.com/orderly/orderly/payment"
	"github.com/orderly/orderly/service"
	"github.com/orderly/orderly/store"
)

// TestBrowserResolveParkedAttempt, on both stores, in Chromium: an
// operator logs in, sees the parked attempt on the overview, finds its
// order by the idempotency key the client used, reads its timeline, and
// resolves the attempt with a finding and a note through the form; the
// order then accepts requests again and the audit log shows the action.
func TestBrowserResolveParkedAttempt(t *testing.T) {
	for _, kind := range testenv.Kinds {
		t.Run(kind, func(t *testing.T) {
			ctx := browser(t)
			f := newFixture(t, kind, console.Config{})
			o, a := f.park()
			base := f.console.URL + console.Prefix
			login(t, ctx, base, operatorToken)
			if got := text(t, ctx, "#parked"); !strings.Contains(got, a.ProviderKey) || !strings.Contains(got, "15.00 EUR") {
				t.Fatalf("overview's parked list = %q; want %s with 15.00 EUR", got, a.ProviderKey)
			}
			if got := text(t, ctx, "#m-attention b"); got != "1" {
				t.Fatalf("overview counts %q attempts needing attention, want 1", got)
			}
			// Find the order by the client's idempotency key, open its timeline.
			// The unfiltered list already shows #orders, so the wait is for the
			// results page: its search box carries q as an attribute, which
			// typing into the first page's box does not set.
			do(t, ctx, chromedp.Navigate(base+"orders"), chromedp.SendKeys(chromedp.CSS("#q"), "pay-1"),
				chromedp.Submit(chromedp.CSS("#search")), chromedp.WaitVisible(chromedp.CSS(`#q[value="pay-1"]`)),
				chromedp.WaitVisible(chromedp.CSS("#orders")))
			if got := text(t, ctx, "#orders"); !strings.Contains(got, o.ID) {
				t.Fatalf("search by idempotency key pay-1 = %q, want %s", got, o.ID)
			}
			do(t, ctx, chromedp.Click(chromedp.CSS("#orders a")), chromedp.WaitVisible(chromedp.CSS("#timeline")))
			if got := text(t, ctx, "#timeline"); !strings.Contains(got, "order.created") || !strings.Contains(got, "charge needs_attention") ||
				!strings.Contains(got, "idempotency key needs_attention") {
				t.Fatalf("timeline = %q; want the event, the parked charge and the parked key", got)
			}
			if got := text(t, ctx, "#amount"); got != "15.00 EUR" {
				t.Fatalf("amount shown %q, want 15.00 EUR", got)
			}
			// Resolve from the attempts page.
			sec := `section[id="attempt-` + o.ID + `"] `
			do(t, ctx, chromedp.Navigate(base+"attempts"), chromedp.WaitVisible(chromedp.CSS(sec+"form.resolve")),
				chromedp.SetValue(chromedp.CSS(sec+`form.resolve select[name="outcome"]`), "not_succeeded"),
				chromedp.SendKeys(chromedp.CSS(sec+`form.resolve input[name="note"]`), "PSP dashboard shows no charge"),
				chromedp.SendKeys(chromedp.CSS(sec+`form.resolve input[name="reason"]`), "ticket 42"),
				chromedp.Click(chromedp.CSS(sec+`form.resolve button[type="submit"]`)),
				chromedp.WaitVisible(chromedp.CSS("#result, #problem")))
			if got := text(t, ctx, "#outcome"); got != "not_succeeded" {
				t.Fatalf("resolve outcome shown %q, want not_succeeded (page: %s)", got, text(t, ctx, "main"))
			}
			if got := f.attempt(a.ProviderKey); got.Status != payment.AttemptDeclined {
				t.Fatalf("attempt after the console's resolution is %s, want declined", got.Status)
			}
			if st, body := f.pay(o, "pay-2", "pm_card_visa"); st != http.StatusOK {
				t.Fatalf("a new pay after the resolution: %d %s, want 200", st, body)
			}
			do(t, ctx, chromedp.Navigate(base+"audit"), chromedp.WaitVisible(chromedp.CSS("#audit")))
			if got := text(t, ctx, "#audit"); !strings.Contains(got, service.ActionResolve) || !strings.Contains(got, "olga") ||
				!strings.Contains(got, "ticket 42") || !strings.Contains(got, "PSP dashboard shows no charge") {
				t.Fatalf("audit log = %q; want olga's attempt.resolve with reason and note", got)
			}
		})
	}
}

// TestBrowserWebhooks, in Chromium: a delivery answered 410 failed and
// disabled its endpoint; the operator re-enables the endpoint and resends
// the delivery through the forms, and the loopback receiver gets it.
func TestBrowserWebhooks(t *testing.T) {
	ctx := browser(t)
	f := newFixture(t, testenv.SQLite, console.Config{})
	rcv := newReceiver(t)
	ep, d, _ := f.failedDelivery(rcv)
	base := f.console.URL + console.Prefix
	login(t, ctx, base, operatorToken)
	if got := text(t, ctx, "#m-failed b"); got != "1" {
		t.Fatalf("overview counts %q failed deliveries, want 1", got)
	}
	do(t, ctx, chromedp.Navigate(base+"endpoints"), chromedp.WaitVisible(chromedp.CSS("#endpoints")))
	if got := text(t, ctx, "#endpoints"); !strings.Contains(got, "disabled") || strings.Contains(got, "whsec_") {
		t.Fatalf("endpoints = %q; want it disabled, and no secret", got)
	}
	do(t, ctx, chromedp.SendKeys(chromedp.CSS(`form.enable input[name="reason"]`), "receiver is back"),
		chromedp.Click(chromedp.CSS(`form.enable button`)), chromedp.WaitVisible(chromedp.CSS("#result, #problem")))
	if got := text(t, ctx, "#outcome"); got != "enabled" {
		t.Fatalf("enable outcome %q (page: %s)", got, text(t, ctx, "main"))
	}
	if e, err := f.ops.Store().FindEndpoint(context.Background(), store.AnyTenant, ep.ID); err != nil || !e.Enabled {
		t.Fatalf("endpoint after the console's enable = %+v, %v", e, err)
	}
	do(t, ctx, chromedp.Navigate(base+"deliveries"), chromedp.WaitVisible(chromedp.CSS("#deliveries")),
		chromedp.SendKeys(chromedp.CSS(`form.resend input[name="reason"]`), "receiver fixed"),
		chromedp.Click(chromedp.CSS(`form.resend button`)), chromedp.WaitVisible(chromedp.CSS("#result, #problem")))
	if got := text(t, ctx, "#outcome"); got != "requeued" {
		t.Fatalf("resend outcome %q (page: %s)", got, text(t, ctx, "main"))
	}
	rcv.answer(http.StatusNoContent)
	if _, err := f.disp.RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := rcv.received(); len(got) != 2 || got[1] != d.EventID {
		t.Fatalf("receiver got %v; want the 410'd attempt then the resent %s", got, d.EventID)
	}
	again, err := f.ops.Store().FindDelivery(context.Background(), store.AnyTenant, ep.ID, d.EventID)
	if err != nil || again.Status != event.DeliverySucceeded {
		t.Fatalf("delivery after the resend = %+v, %v; want succeeded", again, err)
	}
	// Rotate the secret: shown once on the answer, never on the pages.
	do(t, ctx, chromedp.Navigate(base+"endpoints/"+ep.ID), chromedp.WaitVisible(chromedp.CSS("form.rotate")),
		chromedp.SetValue(chromedp.CSS(`form.rotate select[name="grace"]`), "1h0m0s"),
		chromedp.SendKeys(chromedp.CSS(`form.rotate input[name="reason"]`), "secret leaked"),
		chromedp.Click(chromedp.CSS(`form.rotate button`)), chromedp.WaitVisible(chromedp.CSS("#result, #problem")))
	shown := text(t, ctx, "#secret")
	if stored, err := f.env.Store.(store.EventStore).EndpointSecret(context.Background(), testenv.TenantA, ep.ID); err != nil || shown != stored {
		t.Fatalf("the rotation showed %q, the endpoint's secret is %q (%v)", shown, stored, err)
	}
	do(t, ctx, chromedp.Navigate(base+"endpoints/"+ep.ID), chromedp.WaitVisible(chromedp.CSS("#deliveries")))
	if page := text(t, ctx, "body"); strings.Contains(page, shown) || strings.Contains(page, "whsec_") {
		t.Fatalf("the endpoint's page shows a secret after the rotation")
	}
}

// TestBrowserCSRFAndReader, in Chromium: a resolve form whose CSRF token
// was removed is refused and changes nothing; a reader sees the parked
// attempt but no action form anywhere, and a reader's forged POST (valid
// session and CSRF token) is a 403 that changes nothing.
func TestBrowserCSRFAndReader(t *testing.T) {
	ctx := browser(t)
	f := newFixture(t, testenv.SQLite, console.Config{})
	o, a := f.park()
	base := f.console.URL + console.Prefix
	login(t, ctx, base, operatorToken)
	sec := `section[id="attempt-` + o.ID + `"] `
	do(t, ctx, chromedp.Navigate(base+"attempts"), chromedp.WaitVisible(chromedp.CSS(sec+"form.resolve")),
		chromedp.SetAttributeValue(chromedp.CSS(sec+`form.resolve input[name="csrf"]`), "value", ""),
		chromedp.SendKeys(chromedp.CSS(sec+`form.resolve input[name="reason"]`), "ticket 42"),
		chromedp.Click(chromedp.CSS(sec+`form.resolve button[type="submit"]`)),
		chromedp.WaitVisible(chromedp.CSS("#result, #problem")))
	if got := text(t, ctx, "main"); !strings.Contains(got, "HTTP 403") || !strings.Contains(got, "CSRF") {
		t.Fatalf("a form without its CSRF token answered %q; want a 403 naming CSRF", got)
	}
	if got := f.attempt(a.ProviderKey); got.Status != payment.AttemptNeedsAttention {
		t.Fatalf("a refused form changed the attempt to %s", got.Status)
	}
	// A reader, in a fresh tab of its own (a new browser context: no cookie).
	rctx := browser(t)
	login(t, rctx, base, readerToken)
	do(t, rctx, chromedp.Navigate(base+"attempts"), chromedp.WaitVisible(chromedp.CSS(sec)))
	if n := count(t, rctx, `form[action*="/actions/"]`); n != 0 {
		t.Fatalf("a reader's attempts page has %d action forms, want none", n)
	}
	if got := text(t, rctx, sec+".reader-note"); !strings.Contains(got, "reads only") {
		t.Fatalf("reader note = %q", got)
	}
	for _, page := range []string{"", "orders/" + o.ID, "endpoints", "deliveries"} {
		do(t, rctx, chromedp.Navigate(base+page), chromedp.WaitVisible(chromedp.CSS("main")))
		if n := count(t, rctx, `form[action*="/actions/"]`); n != 0 {
			t.Fatalf("a reader's page /%s has %d action forms, want none", page, n)
		}
	}
	// The forged POST: a reader's session and its CSRF token, by hand.
	cookie := sessionCookie(t, base, readerToken)
	form := url.Values{"csrf": {csrfOf(t, base, cookie)}, "ikey": {"forged-1"}, "provider_key": {a.ProviderKey},
		"outcome": {"not_succeeded"}, "reason": {"forged"}}
	st, body := post(t, base+"actions/resolve", cookie, form)
	if st != http.StatusForbidden || !strings.Contains(body, "may only read") {
		t.Fatalf("a reader's forged POST: %d %s; want 403", st, body)
	}
	if got := f.attempt(a.ProviderKey); got.Status != payment.AttemptNeedsAttention {
		t.Fatalf("a reader's forged POST changed the attempt to %s", got.Status)
	}
	if as, err := f.ops.Store().ListOperatorActions(context.Background(), store.ActionSearch{Tenants: store.AnyTenant, Limit: 10}); err != nil ||
		slices.ContainsFunc(as, func(a store.OperatorAction) bool { return a.Actor == "rita" }) || len(as) != 0 {
		t.Fatalf("refused actions were recorded: %+v, %v", as, err)
	}
}
