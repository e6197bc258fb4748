package faultproxy

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// backend is an HTTP server that counts the requests it received.
func backend(t *testing.T) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	return backendWith(t, nil)
}

// backendWith is backend with connState as the server's ConnState hook.
func backendWith(t *testing.T, connState func(net.Conn, http.ConnState)) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var n atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		n.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"ord_1","state":"RCVD","padding":"`+strings.Repeat("x", 200)+`"}`)
	}))
	srv.Config.ConnState = connState
	srv.Start()
	t.Cleanup(srv.Close)
	return srv, &n
}

func startProxy(t *testing.T, target string, f Fates) *Proxy {
	t.Helper()
	p, err := New(target, f, 42)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// post sends one POST without an Idempotency-Key, so net/http never resends
// it by itself: one call is one request on the wire.
func post(c *http.Client, url string) error {
	resp, err := c.Post(url, "application/json", strings.NewReader(`{"a":1}`))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, err = io.ReadAll(resp.Body)
	return err
}

func testClient() *http.Client {
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
}

func TestProxyPassesThroughOnKeepAlive(t *testing.T) {
	srv, n := backend(t)
	p := startProxy(t, strings.TrimPrefix(srv.URL, "http://"), Fates{})
	c := testClient()
	for i := range 25 {
		if err := post(c, p.URL()+"/v1/orders"); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
	}
	st := p.Stats()
	if n.Load() != 25 || st.Requests != 25 || st.Faults() != 0 {
		t.Errorf("backend saw %d, proxy stats %+v; want 25 requests, no faults", n.Load(), st)
	}
	if st.Conns != 1 {
		t.Errorf("%d connections, want 1 (keep-alive through the proxy)", st.Conns)
	}
}

func TestProxyDropForwardsThenSwallowsTheReply(t *testing.T) {
	srv, n := backend(t)
	p := startProxy(t, strings.TrimPrefix(srv.URL, "http://"), Fates{Drop: 1})
	err := post(testClient(), p.URL()+"/v1/orders")
	if err == nil {
		t.Fatal("the request succeeded; want the reply swallowed")
	}
	if n.Load() != 1 {
		t.Errorf("backend saw %d requests, want 1: a dropped reply's request took effect", n.Load())
	}
	if st := p.Stats(); st.Dropped != 1 || st.Requests != 1 {
		t.Errorf("stats %+v, want 1 request, 1 dropped", st)
	}
}

// TestProxyCutNeverForwards: a cut request reaches the backend not at all.
// Synchronised without sleeping: once the proxy is closed (Close waits for
// its goroutines, so every write it would make to the backend is made) and
// the backend has closed every connection the proxy opened (net/http
// reports StateClosed only after the connection's handler returned), the
// backend's count is final.
func TestProxyCutNeverForwards(t *testing.T) {
	var opened, closed atomic.Int64
	srv, n := backendWith(t, func(_ net.Conn, st http.ConnState) {
		switch st {
		case http.StateNew:
			opened.Add(1)
		case http.StateClosed, http.StateHijacked:
			closed.Add(1)
		}
	})
	p := startProxy(t, strings.TrimPrefix(srv.URL, "http://"), Fates{Cut: 1})
	if err := post(testClient(), p.URL()+"/v1/orders"); err == nil {
		t.Fatal("the request succeeded; want the connection cut")
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	// The proxy dials the backend when a client connects, so at least one
	// backend connection was opened; wait (bounded) until all are closed.
	for deadline := time.Now().Add(2 * time.Minute); opened.Load() == 0 || closed.Load() < opened.Load(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the backend's connections from the proxy never closed (%d opened, %d closed)", opened.Load(), closed.Load())
		}
	}
	if n.Load() != 0 {
		t.Errorf("backend saw %d requests, want 0", n.Load())
	}
	if st := p.Stats(); st.Cut != 1 {
		t.Errorf("stats %+v, want 1 cut", st)
	}
}

func TestProxyTruncateTearsTheReply(t *testing.T) {
	srv, n := backend(t)
	p := startProxy(t, strings.TrimPrefix(srv.URL, "http://"), Fates{Truncate: 1})
	if err := post(testClient(), p.URL()+"/v1/orders"); err == nil {
		t.Fatal("the request succeeded; want a torn reply")
	}
	if n.Load() != 1 || p.Stats().Truncated != 1 {
		t.Errorf("backend saw %d, stats %+v; want 1 request, 1 truncated", n.Load(), p.Stats())
	}
}

// TestProxyRatesAddUp draws every fate and checks that the counts agree:
// each failed call is one fault, and only cuts keep a request from the
// backend.
func TestProxyRatesAddUp(t *testing.T) {
	srv, n := backend(t)
	p := startProxy(t, strings.TrimPrefix(srv.URL, "http://"), Fates{Drop: 0.2, Cut: 0.1, Truncate: 0.1})
	c := testClient()
	const calls = 300
	failed := 0
	for range calls {
		if post(c, p.URL()+"/x") != nil {
			failed++
		}
	}
	time.Sleep(50 * time.Millisecond)
	st := p.Stats()
	if st.Requests != calls || int64(failed) != st.Faults() {
		t.Errorf("%d calls, %d failed; stats %+v", calls, failed, st)
	}
	if n.Load() != calls-st.Cut {
		t.Errorf("backend saw %d requests, want %d (calls - cuts)", n.Load(), calls-st.Cut)
	}
	for name, v := range map[string]int64{"dropped": st.Dropped, "cut": st.Cut, "truncated": st.Truncated} {
		if v == 0 {
			t.Errorf("no %s requests in %d draws", name, calls)
		}
	}
	// Faults off: everything passes again.
	p.SetFates(Fates{})
	for i := range 10 {
		if err := post(c, p.URL()+"/x"); err != nil {
			t.Fatalf("after SetFates(zero), request %d: %v", i, err)
		}
	}
}

func TestProxyBackendDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	p := startProxy(t, addr, Fates{})
	if err := post(testClient(), p.URL()+"/x"); err == nil {
		t.Fatal("a request through a proxy to a closed port succeeded")
	}
	if st := p.Stats(); st.DialFailed != 1 {
		t.Errorf("stats %+v, want 1 dial failure", st)
	}
}

func TestFatesValidate(t *testing.T) {
	for _, f := range []Fates{{Drop: -0.1}, {Cut: 1.5}, {Drop: 0.6, Truncate: 0.6}} {
		if f.Validate() == nil {
			t.Errorf("%+v validated", f)
		}
	}
	if err := (Fates{Drop: 0.5, Cut: 0.25, Truncate: 0.25}).Validate(); err != nil {
		t.Error(err)
	}
}
