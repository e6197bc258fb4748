package provhttp_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orderly/orderly/internal/provhttp"
	"github.com/orderly/orderly/internal/requestid"
)

// server is an httptest.Server that counts the requests it reads.
type server struct {
	*httptest.Server
	n atomic.Int32
}

// serve runs h behind a counting loopback server until the test ends.
func serve(t *testing.T, h http.HandlerFunc) *server {
	t.Helper()
	s := &server{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.n.Add(1)
		h(w, r)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *server) requests() int { return int(s.n.Load()) }

func newClient(t *testing.T, url string, timeout time.Duration) *provhttp.Client {
	t.Helper()
	c, err := provhttp.New(url, timeout, nil)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// hangUp reads the whole request, then closes the connection without an
// answer.
func hangUp(t *testing.T, w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		t.Errorf("Hijack: %v", err)
		return
	}
	conn.Close()
}

// closedURL returns the URL of a loopback port that nothing listens on.
func closedURL(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return "http://" + ln.Addr().String()
}

// sendError returns err's *SendError, failing the test if there is none.
func sendError(t *testing.T, err error) *provhttp.SendError {
	t.Helper()
	var se *provhttp.SendError
	if !errors.As(err, &se) {
		t.Fatalf("err = %v (%T), want a *SendError", err, err)
	}
	return se
}

func TestNewRejectsBadArguments(t *testing.T) {
	t.Parallel()
	for _, u := range []string{"", "127.0.0.1:8090", "localhost:8090", "ftp://127.0.0.1", "http://", "://x"} {
		_, err := provhttp.New(u, time.Second, nil)
		if err == nil || !strings.HasPrefix(err.Error(), "URL ") {
			t.Errorf("New(%q) = %v, want a URL error", u, err)
		}
	}
	for _, d := range []time.Duration{0, -time.Second} {
		if _, err := provhttp.New("http://127.0.0.1:1", d, nil); err == nil {
			t.Errorf("New with timeout %s succeeded", d)
		}
	}
}

func TestDoSendsJSONWithTheKey(t *testing.T) {
	t.Parallel()
	type seen struct{ method, uri, accept, ctype, key, body string }
	got := make(chan seen, 2)
	s := serve(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- seen{r.Method, r.URL.RequestURI(), r.Header.Get("Accept"), r.Header.Get("Content-Type"), r.Header.Get("Idempotency-Key"), string(b)}
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"id":"x"}`)
	})
	c := newClient(t, s.URL+"/", time.Second)
	ctx := context.Background()
	a, err := c.Do(ctx, http.MethodPost, "/v1/things", "k/1", map[string]int{"n": 1})
	if err != nil || a.Status != http.StatusCreated || string(a.Body) != `{"id":"x"}` || a.ReadErr != nil {
		t.Fatalf("Do = %+v, %v", a, err)
	}
	want := seen{"POST", "/v1/things", "application/json", "application/json", "k/1", `{"n":1}`}
	if g := <-got; g != want {
		t.Errorf("server saw %+v, want %+v", g, want)
	}
	if _, err := c.Do(ctx, http.MethodGet, "/v1/things?idempotency_key=k%2F1", "", nil); err != nil {
		t.Fatal(err)
	}
	want = seen{"GET", "/v1/things?idempotency_key=k%2F1", "application/json", "", "", ""}
	if g := <-got; g != want {
		t.Errorf("server saw %+v, want %+v", g, want)
	}
}

func TestDoSendsTheRequestID(t *testing.T) {
	t.Parallel()
	got := make(chan string, 2)
	s := serve(t, func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Get(requestid.Header)
		_, _ = io.WriteString(w, "{}")
	})
	c := newClient(t, s.URL, 10*time.Second)
	if _, err := c.Do(requestid.NewContext(context.Background(), "req-42"), http.MethodPost, "/v1/things", "k", struct{}{}); err != nil {
		t.Fatal(err)
	}
	if id := <-got; id != "req-42" {
		t.Errorf("X-Request-Id = %q, want req-42", id)
	}
	if _, err := c.Do(context.Background(), http.MethodGet, "/v1/things", "", nil); err != nil {
		t.Fatal(err)
	}
	if id := <-got; id != "" {
		t.Errorf("X-Request-Id = %q without a request id in the context, want none", id)
	}
}

func TestDoClosedListenerIsNotSent(t *testing.T) {
	t.Parallel()
	_, err := newClient(t, closedURL(t), time.Second).Do(context.Background(), http.MethodPost, "/v1/things", "k", struct{}{})
	se := sendError(t, err)
	var oe *net.OpError
	if se.Sent || !errors.As(err, &oe) || oe.Op != "dial" {
		t.Errorf("err = %v (sent %v), want a dial error before sending", err, se.Sent)
	}
}

func TestDoEndedContextSendsNothing(t *testing.T) {
	t.Parallel()
	s := serve(t, func(w http.ResponseWriter, r *http.Request) {})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := newClient(t, s.URL, time.Second).Do(ctx, http.MethodPost, "/v1/things", "k", struct{}{})
	if se := sendError(t, err); se.Sent || se.Err != context.Canceled {
		t.Errorf("err = %v (sent %v), want context.Canceled before sending", err, se.Sent)
	}
	if n := s.requests(); n != 0 {
		t.Errorf("server read %d requests, want 0", n)
	}
}

func TestDoHangUpAfterReadingIsSent(t *testing.T) {
	t.Parallel()
	s := serve(t, func(w http.ResponseWriter, r *http.Request) { hangUp(t, w, r) })
	c := newClient(t, s.URL, 5*time.Second)
	for _, method := range []string{http.MethodPost, http.MethodGet} {
		var body any
		if method == http.MethodPost {
			body = struct{}{}
		}
		_, err := c.Do(context.Background(), method, "/v1/things", "k", body)
		if se := sendError(t, err); !se.Sent {
			t.Errorf("%s: err = %v, want sent", method, err)
		}
	}
}

// A request with a body whose answer is dropped on a reused connection
// (which net/http would resend by itself for a request with an
// Idempotency-Key and a GetBody) reaches the server once.
func TestDoNeverResendsARequestWithABody(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var addrs []string
	s := serve(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		addrs = append(addrs, r.RemoteAddr)
		mu.Unlock()
		if r.Method == http.MethodGet {
			_, _ = io.WriteString(w, `{}`) // keeps the connection for the POST
			return
		}
		hangUp(t, w, r)
	})
	c := newClient(t, s.URL, 5*time.Second)
	ctx := context.Background()
	if _, err := c.Do(ctx, http.MethodGet, "/warm-up", "", nil); err != nil {
		t.Fatal(err)
	}
	_, err := c.Do(ctx, http.MethodPost, "/v1/things", "k", struct{}{})
	if se := sendError(t, err); !se.Sent {
		t.Errorf("err = %v, want sent", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(addrs) != 2 || addrs[0] != addrs[1] {
		t.Errorf("server read requests from %v, want the warm-up and the POST on one connection", addrs)
	}
}

// timeouts returns the per-call timeouts to try, doubling from 100ms to
// about 50s. A timeout test tries the next one while the call ends too early
// (the scheduler of a busy machine did not let the request be written, or
// the answer's head arrive, within the timeout) and asserts what a call that
// ended at the intended moment returns: no test depends on a deadline being
// met by the scheduler.
func timeouts() []time.Duration {
	var ds []time.Duration
	for d := 100 * time.Millisecond; d < time.Minute; d *= 2 {
		ds = append(ds, d)
	}
	return ds
}

func TestDoTimeout(t *testing.T) {
	t.Parallel()
	t.Run("awaiting the answer", func(t *testing.T) {
		t.Parallel()
		// If the timeout did not end the call, the server answers 200
		// after a minute and the call succeeds, failing the test.
		s := serve(t, func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body) // then the server notices the hang-up
			select {
			case <-r.Context().Done():
			case <-time.After(time.Minute):
			}
		})
		for _, d := range timeouts() {
			_, err := newClient(t, s.URL, d).Do(context.Background(), http.MethodPost, "/v1/things", "k", struct{}{})
			se := sendError(t, err)
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("err = %v, want the call's deadline", err)
			}
			if se.Sent {
				return
			}
			t.Logf("timeout %s ended the call before the request was written; doubling it", d)
		}
		t.Fatal("no timeout let the request be written before it ended the call")
	})
	t.Run("reading the answer", func(t *testing.T) {
		t.Parallel()
		s := serve(t, func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.WriteString(w, `{"id":`)
			_ = http.NewResponseController(w).Flush()
			select {
			case <-r.Context().Done():
			case <-time.After(time.Minute):
			}
		})
		for _, d := range timeouts() {
			a, err := newClient(t, s.URL, d).Do(context.Background(), http.MethodPost, "/v1/things", "k", struct{}{})
			var se *provhttp.SendError
			if errors.As(err, &se) && errors.Is(err, context.DeadlineExceeded) {
				t.Logf("timeout %s ended the call before the answer's head came; doubling it", d)
				continue
			}
			if err != nil || a.Status != http.StatusOK || string(a.Body) != `{"id":` || !errors.Is(a.ReadErr, context.DeadlineExceeded) {
				t.Errorf("Do = %+v, %v; want a 200 whose reading hit the deadline", a, err)
			}
			return
		}
		t.Fatal("no timeout let the answer's head arrive before it ended the call")
	})
}

func TestDoBoundsTheAnswer(t *testing.T) {
	t.Parallel()
	s := serve(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write(make([]byte, provhttp.MaxAnswerBytes+4096))
	})
	a, err := newClient(t, s.URL, 5*time.Second).Do(context.Background(), http.MethodGet, "/big", "", nil)
	if err != nil || a.ReadErr != nil || len(a.Body) != provhttp.MaxAnswerBytes {
		t.Errorf("Do = %d bytes, %v, %v; want %d bytes", len(a.Body), a.ReadErr, err, provhttp.MaxAnswerBytes)
	}
}

func TestDoDoesNotFollowRedirects(t *testing.T) {
	t.Parallel()
	s := serve(t, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/elsewhere", http.StatusFound)
	})
	a, err := newClient(t, s.URL, 5*time.Second).Do(context.Background(), http.MethodPost, "/v1/things", "k", struct{}{})
	if err != nil || a.Status != http.StatusFound {
		t.Errorf("Do = %+v, %v; want the 302 itself", a, err)
	}
	if n := s.requests(); n != 1 {
		t.Errorf("server read %d requests, want 1", n)
	}
}

func TestDoUnsendableRequest(t *testing.T) {
	t.Parallel()
	s := serve(t, func(w http.ResponseWriter, r *http.Request) {})
	c := newClient(t, s.URL, time.Second)
	ctx := context.Background()
	for _, tt := range []struct {
		name, method string
		body         any
	}{
		{"unmarshalable body", http.MethodPost, make(chan int)},
		{"bad method", "BAD METHOD", nil},
	} {
		_, err := c.Do(ctx, tt.method, "/v1/things", "k", tt.body)
		var se *provhttp.SendError
		if err == nil || errors.As(err, &se) {
			t.Errorf("%s: err = %v, want an error that is not a *SendError", tt.name, err)
		}
	}
	if n := s.requests(); n != 0 {
		t.Errorf("server read %d requests, want 0", n)
	}
}

func TestCallDecodesASuccess(t *testing.T) {
	t.Parallel()
	s := serve(t, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"id":"x"}`)
	})
	var out struct{ ID string }
	if err := newClient(t, s.URL, time.Second).Call(context.Background(), http.MethodPost, "/v1/things", "k", struct{}{}, &out); err != nil || out.ID != "x" {
		t.Errorf("Call = %v, decoded %+v; want id x", err, out)
	}
}

// failure returns err's *Failure, failing the test if there is none.
func failure(t *testing.T, err error) *provhttp.Failure {
	t.Helper()
	var f *provhttp.Failure
	if !errors.As(err, &f) {
		t.Fatalf("err = %v (%T), want a *Failure", err, err)
	}
	return f
}

func TestCallClassifiesAnswers(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		status     int
		body       string
		wantChange provhttp.Verdict // of a POST
		wantRead   provhttp.Verdict // of a GET
	}{
		{"500", 500, `{"error":{"type":"api_error"}}`, provhttp.Retryable, provhttp.Retryable},
		{"503 without a body", 503, "", provhttp.Retryable, provhttp.Retryable},
		{"400", 400, `{"error":{"type":"invalid_request_error"}}`, provhttp.Final, provhttp.Final},
		{"402", 402, "", provhttp.Final, provhttp.Final},
		{"404", 404, "", provhttp.Final, provhttp.Final},
		{"408", 408, "", provhttp.Retryable, provhttp.Retryable},
		{"409", 409, "", provhttp.Final, provhttp.Final},
		{"429", 429, "", provhttp.Retryable, provhttp.Retryable},
		{"2xx with an unreadable body", 200, `{"id":`, provhttp.Unknown, provhttp.Retryable},
		{"redirect", 302, "", provhttp.Unknown, provhttp.Retryable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := serve(t, func(w http.ResponseWriter, r *http.Request) {
				if tt.status == 302 {
					w.Header().Set("Location", "/elsewhere")
				}
				w.WriteHeader(tt.status)
				_, _ = io.WriteString(w, tt.body)
			})
			c := newClient(t, s.URL, 5*time.Second)
			for _, call := range []struct {
				method string
				body   any
				want   provhttp.Verdict
			}{{http.MethodPost, struct{}{}, tt.wantChange}, {http.MethodGet, nil, tt.wantRead}} {
				var out struct{ ID string }
				f := failure(t, c.Call(context.Background(), call.method, "/v1/things", "k", call.body, &out))
				if f.Verdict != call.want || f.Status != tt.status || string(f.Body) != tt.body {
					t.Errorf("%s: Failure = %v, %d, %q; want %v, %d, %q", call.method, f.Verdict, f.Status, f.Body, call.want, tt.status, tt.body)
				}
			}
		})
	}
}

func TestCallClassifiesCallsWithoutAnAnswer(t *testing.T) {
	t.Parallel()
	refused := closedURL(t)
	hungUp := serve(t, func(w http.ResponseWriter, r *http.Request) { hangUp(t, w, r) }).URL
	ended, cancel := context.WithCancel(context.Background())
	cancel()

	tests := []struct {
		name, url, method string
		ctx               context.Context
		body              any
		want              provhttp.Verdict
		wantCause         error // matched through errors.Is, if not nil
	}{
		{"refused POST", refused, http.MethodPost, context.Background(), struct{}{}, provhttp.Retryable, nil},
		{"POST with an ended context", hungUp, http.MethodPost, ended, struct{}{}, provhttp.Retryable, context.Canceled},
		{"POST hung up after it was read", hungUp, http.MethodPost, context.Background(), struct{}{}, provhttp.Unknown, nil},
		{"GET hung up after it was read", hungUp, http.MethodGet, context.Background(), nil, provhttp.Retryable, nil},
		{"unmarshalable body", hungUp, http.MethodPost, context.Background(), make(chan int), provhttp.Final, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var out struct{}
			f := failure(t, newClient(t, tt.url, 5*time.Second).Call(tt.ctx, tt.method, "/v1/things", "k", tt.body, &out))
			if f.Verdict != tt.want || f.Status != 0 || f.Body != nil {
				t.Errorf("Failure = %v, %d, %q; want %v without an answer", f.Verdict, f.Status, f.Body, tt.want)
			}
			if tt.wantCause != nil && !errors.Is(f, tt.wantCause) {
				t.Errorf("Failure %v does not match %v", f, tt.wantCause)
			}
		})
	}
}

func TestFailureMessages(t *testing.T) {
	t.Parallel()
	tests := []struct {
		f    *provhttp.Failure
		want string
	}{
		{&provhttp.Failure{Verdict: provhttp.Retryable, Status: 503}, "answered 503"},
		{&provhttp.Failure{Verdict: provhttp.Unknown, Status: 200, Err: errors.New("unexpected EOF")}, "answered 200: unexpected EOF"},
		{&provhttp.Failure{Verdict: provhttp.Retryable, Err: &provhttp.SendError{Err: errors.New("dial")}}, "request not sent: dial"},
	}
	for _, tt := range tests {
		if got := tt.f.Error(); got != tt.want {
			t.Errorf("Error() = %q, want %q", got, tt.want)
		}
	}
	for v, want := range map[provhttp.Verdict]string{provhttp.Retryable: "retryable", provhttp.Final: "final", provhttp.Unknown: "unknown outcome", 0: "Verdict(0)"} {
		if got := v.String(); got != want {
			t.Errorf("Verdict(%d).String() = %q, want %q", int(v), got, want)
		}
	}
}
