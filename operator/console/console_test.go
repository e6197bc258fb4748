package console_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/orderly/orderly/internal/testclock"
	"github.com/orderly/orderly/internal/testenv"
	"github.com/orderly/orderly/operator/console"
	"github.com/orderly/orderly/store"
)

const wantCSP = "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"

// TestPagesAreLockedDown: every page answers the strict headers (CSP with
// nothing inline, never framed, not cached) and holds no script, no
// inline style and no secret; money is in major units of its currency.
func TestPagesAreLockedDown(t *testing.T) {
	f := newFixture(t, testenv.SQLite, console.Config{})
	rcv := newReceiver(t)
	ep, _, o := f.failedDelivery(rcv)
	base := f.console.URL + console.Prefix
	c := sessionCookie(t, base, operatorToken)
	for _, page := range []string{"login", "", "orders", "orders?q=" + o.ID, "orders/" + o.ID, "attempts", "endpoints",
		"endpoints/" + ep.ID, "deliveries", "audit", "nope"} {
		resp, body := get(t, base+page, c, nil)
		h := resp.Header
		if h.Get("Content-Security-Policy") != wantCSP || h.Get("X-Frame-Options") != "DENY" ||
			h.Get("X-Content-Type-Options") != "nosniff" || h.Get("Cache-Control") != "no-store" || h.Get("Referrer-Policy") != "no-referrer" {
			t.Errorf("/%s: headers %v", page, h)
		}
		for _, bad := range []string{"<script", " style=", "onclick", "whsec_"} {
			if strings.Contains(body, bad) {
				t.Errorf("/%s renders %q", page, bad)
			}
		}
	}
	_, body := get(t, base+"orders/"+o.ID, c, nil)
	if !strings.Contains(body, "1200 JPY") {
		t.Errorf("the JPY order's amount is not shown as 1200 JPY (no minor unit)")
	}
	if resp, _ := get(t, base+"static/console.css", nil, nil); resp.StatusCode != http.StatusOK ||
		!strings.HasPrefix(resp.Header.Get("Content-Type"), "text/css") {
		t.Errorf("stylesheet: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
}

func cookieNamed(resp *http.Response) *http.Cookie {
	for _, c := range resp.Cookies() {
		if c.Name == console.CookieName {
			return c
		}
	}
	return nil
}

// TestSessionCookieAndBasePath: the session cookie is HttpOnly and
// SameSite=Strict, Secure behind TLS (X-Forwarded-Proto: https), scoped
// to the console's path, which follows X-Forwarded-Prefix when it is a
// clean path and the configured base path above all.
func TestSessionCookieAndBasePath(t *testing.T) {
	f := newFixture(t, testenv.SQLite, console.Config{})
	base := f.console.URL + console.Prefix
	for _, c := range []struct {
		name           string
		header         http.Header
		secure         bool
		path, location string
	}{
		{"direct", nil, false, "/operator/", "/operator/"},
		{"behind TLS", http.Header{"X-Forwarded-Proto": {"https"}}, true, "/operator/", "/operator/"},
		{"behind a prefix", http.Header{"X-Forwarded-Prefix": {"/ops"}, "X-Forwarded-Proto": {"https"}}, true, "/ops/operator/", "/ops/operator/"},
		{"an unclean prefix is ignored", http.Header{"X-Forwarded-Prefix": {"//evil.example"}}, false, "/operator/", "/operator/"},
	} {
		resp := loginResponse(t, base, operatorToken, c.header)
		ck := cookieNamed(resp)
		if resp.StatusCode != http.StatusSeeOther || ck == nil || !ck.HttpOnly || ck.SameSite != http.SameSiteStrictMode ||
			ck.Secure != c.secure || ck.Path != c.path || resp.Header.Get("Location") != c.location || ck.MaxAge <= 0 {
			t.Errorf("%s: %d Location=%q cookie=%+v", c.name, resp.StatusCode, resp.Header.Get("Location"), ck)
		}
	}
	ck := sessionCookie(t, base, operatorToken)
	_, body := get(t, base, ck, http.Header{"X-Forwarded-Prefix": {"/ops"}})
	if !strings.Contains(body, `href="/ops/operator/orders"`) || !strings.Contains(body, `href="/ops/operator/static/console.css"`) ||
		!strings.Contains(body, `action="/ops/operator/logout"`) {
		t.Errorf("links behind X-Forwarded-Prefix /ops do not start with /ops/operator/: %s", body)
	}
	// A configured base path wins over the proxy's header.
	g := newFixture(t, testenv.SQLite, console.Config{BasePath: "/admin"})
	resp := loginResponse(t, g.console.URL+console.Prefix, operatorToken, http.Header{"X-Forwarded-Prefix": {"/ops"}})
	if ck := cookieNamed(resp); ck == nil || ck.Path != "/admin/operator/" || resp.Header.Get("Location") != "/admin/operator/" {
		t.Errorf("with BasePath /admin: Location=%q cookie=%+v", resp.Header.Get("Location"), ck)
	}
}

// TestSessions: a page without a session, with a tampered or an expired
// cookie, or after logout sends the browser to the login page (a POST is
// a 401); a tenant API key is no operator login; failed logins are
// limited per address, then even the right token is a 429 with
// Retry-After.
func TestSessions(t *testing.T) {
	clk := testclock.New(time.Now())
	f := newFixture(t, testenv.SQLite, console.Config{Now: clk.Now, SessionTTL: time.Hour, AuthFailuresPerMinute: 3})
	base := f.console.URL + console.Prefix
	toLogin := func(name string, c *http.Cookie) {
		t.Helper()
		resp, _ := get(t, base+"attempts", c, nil)
		if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/operator/login" {
			t.Errorf("%s: %d %q, want 303 to /operator/login", name, resp.StatusCode, resp.Header.Get("Location"))
		}
	}
	toLogin("no cookie", nil)
	good := sessionCookie(t, base, operatorToken)
	if resp, _ := get(t, base+"attempts", good, nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("a fresh session: %d", resp.StatusCode)
	}
	tampered := *good
	payload, sig, _ := strings.Cut(good.Value, ".")
	tampered.Value = strings.Replace(payload, payload[:4], "eyJu", 1) + "x." + sig
	toLogin("tampered", &tampered)
	forged := *good
	forged.Value = payload + ".AAAA"
	toLogin("bad signature", &forged)
	clk.Advance(time.Hour + time.Second)
	toLogin("expired", good)
	good = sessionCookie(t, base, operatorToken)
	csrf := csrfOf(t, base, good)
	if st, _ := post(t, base+"logout", good, url.Values{"csrf": {csrf}}); st != http.StatusSeeOther {
		t.Fatalf("logout: %d", st)
	}
	toLogin("after logout", good)
	if st, _ := post(t, base+"actions/resend", nil, url.Values{}); st != http.StatusUnauthorized {
		t.Errorf("a POST without a session: %d, want 401", st)
	}
	// Failed logins: a tenant API key is one; past 3, the right token waits.
	for i, tok := range []string{testenv.KeyA, "wrong-wrong-wrong-wrong", "wrong-wrong-wrong-wrong"} {
		if resp := loginResponse(t, base, tok, nil); resp.StatusCode != http.StatusUnauthorized || cookieNamed(resp) != nil {
			t.Fatalf("failed login %d: %d, cookie %v", i+1, resp.StatusCode, cookieNamed(resp))
		}
	}
	resp := loginResponse(t, base, operatorToken, nil)
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" || cookieNamed(resp) != nil {
		t.Fatalf("login past the allowance: %d Retry-After=%q", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	clk.Advance(time.Minute)
	if resp := loginResponse(t, base, operatorToken, nil); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("login once the bucket refilled: %d", resp.StatusCode)
	}
}

// TestFormsAreGuardedAndIdempotent: a POST without the CSRF token, with
// another session's, or from another site is a 403 that does nothing; a
// form submitted twice (its Idempotency-Key) is one action, the second
// answer replayed.
func TestFormsAreGuardedAndIdempotent(t *testing.T) {
	f := newFixture(t, testenv.SQLite, console.Config{})
	rcv := newReceiver(t)
	ep, d, _ := f.failedDelivery(rcv)
	base := f.console.URL + console.Prefix
	c := sessionCookie(t, base, operatorToken)
	other := sessionCookie(t, base, operatorToken)
	form := func(csrf string) url.Values {
		return url.Values{"csrf": {csrf}, "ikey": {"console-form-1"}, "back": {"/deliveries"}, "endpoint_id": {ep.ID},
			"event_id": {d.EventID}, "reason": {"receiver fixed"}}
	}
	for name, csrf := range map[string]string{"no token": "", "another session's token": csrfOf(t, base, other), "garbage": "x"} {
		if st, body := post(t, base+"actions/resend", c, form(csrf)); st != http.StatusForbidden || !strings.Contains(body, "CSRF") {
			t.Errorf("%s: %d, want 403 naming CSRF", name, st)
		}
	}
	req, _ := http.NewRequest("POST", base+"actions/resend", strings.NewReader(form(csrfOf(t, base, c)).Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Sec-Fetch-Site", "cross-site")
	req.AddCookie(c)
	resp, err := noRedirect.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("a cross-site POST: %d, want 403", resp.StatusCode)
	}
	if got, _ := f.ops.Store().FindDelivery(context.Background(), store.AnyTenant, ep.ID, d.EventID); got.Status != "failed" {
		t.Fatalf("a refused form changed the delivery to %s", got.Status)
	}
	csrf := csrfOf(t, base, c)
	st, first := post(t, base+"actions/resend", c, form(csrf))
	if st != http.StatusOK || !strings.Contains(first, "requeued") || strings.Contains(first, "replayed") {
		t.Fatalf("resend: %d %s", st, first)
	}
	st, second := post(t, base+"actions/resend", c, form(csrf))
	if st != http.StatusOK || !strings.Contains(second, "replayed") {
		t.Fatalf("the same form again: %d %s, want the first answer replayed", st, second)
	}
	as, err := f.ops.Store().ListOperatorActions(context.Background(), store.ActionSearch{Tenants: store.AnyTenant, Limit: 10})
	if err != nil || len(as) != 1 || as[0].Actor != "olga" || as[0].Reason != "receiver fixed" {
		t.Fatalf("audit after a form submitted twice = %+v, %v; want one action", as, err)
	}
	// Another key with the delivery no longer failed: the service's problem, shown.
	f2 := form(csrf)
	f2.Set("ikey", "console-form-2")
	if st, body := post(t, base+"actions/resend", c, f2); st != http.StatusConflict || !strings.Contains(body, "delivery_not_failed") {
		t.Fatalf("resend of a pending delivery: %d %s, want 409 delivery_not_failed", st, body)
	}
}
