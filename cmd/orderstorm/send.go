package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/orderly/orderly/client"
	"github.com/orderly/orderly/cmd/orderstorm/internal/book"
	"github.com/orderly/orderly/order"
)

// httpCounter is the transport under every client of the harness: it counts
// requests (each a client attempt) and answers by status.
type httpCounter struct {
	next     http.RoundTripper
	requests atomic.Int64
	neterrs  atomic.Int64
	mu       sync.Mutex
	byStatus map[int]int64
}

func newHTTPCounter(next http.RoundTripper) *httpCounter {
	return &httpCounter{next: next, byStatus: map[int]int64{}}
}

func (h *httpCounter) RoundTrip(r *http.Request) (*http.Response, error) {
	h.requests.Add(1)
	resp, err := h.next.RoundTrip(r)
	if err != nil {
		h.neterrs.Add(1)
		return resp, err
	}
	h.mu.Lock()
	h.byStatus[resp.StatusCode]++
	h.mu.Unlock()
	if slot, ok := r.Context().Value(bodySlotKey{}).(*bodySlot); ok {
		resp.Body = &hashingBody{ReadCloser: resp.Body, h: sha256.New(), slot: slot}
	}
	return resp, nil
}

// bodySlotKey is the context key of a call's *bodySlot.
type bodySlotKey struct{}

// bodySlot receives the SHA-256 of the body of the last response a call
// read to its end (the Go client reads every body whole): the answer's
// bytes, for the replay byte-for-byte check.
type bodySlot struct {
	mu   sync.Mutex
	hash string
}

func (s *bodySlot) get() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.hash
}

// hashingBody hashes a response body as it is read and, at its end, puts
// the digest in its slot.
type hashingBody struct {
	io.ReadCloser
	h    hash.Hash
	slot *bodySlot
	done bool
}

func (b *hashingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.h.Write(p[:n])
	if errors.Is(err, io.EOF) && !b.done {
		b.done = true
		b.slot.mu.Lock()
		b.slot.hash = hex.EncodeToString(b.h.Sum(nil))
		b.slot.mu.Unlock()
	}
	return n, err
}

// Statuses returns the count of answers by status code.
func (h *httpCounter) Statuses() map[string]int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make(map[string]int64, len(h.byStatus))
	for k, v := range h.byStatus {
		out[strconv.Itoa(k)] = v
	}
	return out
}

func (h *httpCounter) status(code int) int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.byStatus[code]
}

// newTransport returns the HTTP transport shared by a run's clients.
func newTransport(conns int) *http.Transport {
	return &http.Transport{
		Proxy:               nil,
		MaxIdleConns:        conns * 4,
		MaxIdleConnsPerHost: conns * 2,
		IdleConnTimeout:     30 * time.Second,
		DisableCompression:  true,
		ForceAttemptHTTP2:   false,
	}
}

// Sender makes the calls of a run: keyed ones with the Go client (one client
// per instance), keyless ones as raw requests.
type Sender struct {
	bases     []string
	clients   []*client.Client
	raw       *http.Client
	apiKey    string
	attempts  int
	backoff   time.Duration
	maxWait   time.Duration
	attemptTO time.Duration
	counter   *httpCounter
	lat       *Latencies
	retries   atomic.Int64 // attempts beyond the first, over every call
}

// SenderConfig configures NewSender.
type SenderConfig struct {
	Bases          []string
	APIKey         string
	Attempts       int
	Backoff        time.Duration
	MaxBackoff     time.Duration
	AttemptTimeout time.Duration
	Conns          int
}

// NewSender returns a Sender for the instances at cfg.Bases.
func NewSender(cfg SenderConfig, lat *Latencies) (*Sender, error) {
	counter := newHTTPCounter(newTransport(cfg.Conns))
	hc := &http.Client{Transport: counter}
	s := &Sender{bases: cfg.Bases, raw: hc, apiKey: cfg.APIKey, attempts: cfg.Attempts, backoff: cfg.Backoff,
		maxWait: cfg.MaxBackoff, attemptTO: cfg.AttemptTimeout, counter: counter, lat: lat}
	for _, b := range cfg.Bases {
		c, err := client.New(b, cfg.APIKey, client.WithHTTPClient(hc), client.WithMaxAttempts(cfg.Attempts),
			client.WithBackoff(cfg.Backoff, cfg.MaxBackoff), client.WithMaxRetryAfter(cfg.MaxBackoff),
			client.WithAttemptTimeout(cfg.AttemptTimeout), client.WithUserAgent("orderstorm/1"))
		if err != nil {
			return nil, err
		}
		s.clients = append(s.clients, c)
	}
	return s, nil
}

// Send makes one call of op on instance inst and records it.
func (s *Sender) Send(ctx context.Context, op *book.Op, inst int, via string) book.Obs {
	start := time.Now()
	var ob book.Obs
	if op.Keyed {
		ob = s.keyed(ctx, op, inst)
	} else {
		body := op.Body
		if via == book.ViaDoubleClick && op.AltBody != nil {
			body = op.AltBody
		}
		ob = s.keyless(ctx, op, inst, body)
	}
	ob.Via, ob.Instance, ob.Latency, ob.At = via, inst, time.Since(start), start
	if ob.Attempts > 1 {
		s.retries.Add(int64(ob.Attempts - 1))
	}
	op.Record(ob)
	kind := op.Kind
	if via == book.ViaSequenceReplay {
		kind = book.KindReplay
	}
	if ob.Definitive && s.lat != nil {
		s.lat.Add(kind, ob.Latency)
	}
	return ob
}

func (s *Sender) keyed(ctx context.Context, op *book.Op, inst int) book.Obs {
	c := s.clients[inst]
	key := client.WithIdempotencyKey(op.Key)
	slot := &bodySlot{}
	ctx = context.WithValue(ctx, bodySlotKey{}, slot)
	var res *client.Response[order.Order]
	var err error
	switch op.Kind {
	case book.KindCreate:
		res, err = c.CreateOrder(ctx, *op.Create, key)
	case book.KindPay:
		var pr *client.Response[client.PayResult]
		pr, err = c.PayOrder(ctx, op.Order.ID(), *op.Pay, key)
		res = payResponse(pr)
	case book.KindFulfill:
		res, err = c.FulfillOrder(ctx, op.Order.ID(), key)
	case book.KindCancel:
		res, err = c.CancelOrder(ctx, op.Order.ID(), key)
	case book.KindRefund:
		var rr *client.Response[client.Refund]
		rr, err = c.RefundOrder(ctx, op.Order.ID(), *op.Refund, key)
		res = refundResponse(rr)
	default:
		return book.Obs{Err: "unknown kind " + op.Kind}
	}
	ob := fromClient(res, err)
	if ob.Definitive {
		ob.BodyHash = slot.get()
	}
	return ob
}

// fromClient turns a client call's result into an observation.
func fromClient(res *client.Response[order.Order], err error) book.Obs {
	ob := book.Obs{}
	if res != nil {
		ob.Status, ob.Attempts, ob.Replayed = res.StatusCode, res.Attempts, res.Replayed
	}
	if err == nil {
		ob.Definitive, ob.ResourceID, ob.State, ob.Version = true, res.Value.ID, string(res.Value.State), res.Value.Version
		ob.Token = res.Header.Get(consistencyHeader)
		return ob
	}
	ob.Err = shorten(err.Error())
	var apiErr *client.Error
	if errors.As(err, &apiErr) {
		ob.Status, ob.Code, ob.Replayed = apiErr.StatusCode, apiErr.Code, apiErr.Replayed
		ob.Definitive = !apiErr.Retryable && apiErr.StatusCode != http.StatusInternalServerError
		return ob
	}
	ob.Replayed = false
	return ob
}

func shorten(s string) string {
	if len(s) > 240 {
		return s[:240] + "…"
	}
	return s
}

// keyless sends op without an Idempotency-Key, retrying network failures
// and retryable answers with the same body, as a browser form or a naive
// client would.
func (s *Sender) keyless(ctx context.Context, op *book.Op, inst int, body []byte) book.Obs {
	url := s.bases[inst] + op.Path
	ob := book.Obs{}
	for attempt := 1; attempt <= s.attempts; attempt++ {
		ob.Attempts = attempt
		status, header, answer, err := s.rawOnce(ctx, url, body)
		wait := s.jitter(attempt)
		if err != nil {
			ob.Status, ob.Err = 0, shorten(err.Error())
			if ctx.Err() != nil {
				return ob
			}
		} else {
			ob.Status, ob.Err, ob.Code = status, "", ""
			ob.Replayed = header.Get("Idempotency-Replayed") == "true"
			sum := sha256.Sum256(answer)
			ob.BodyHash = hex.EncodeToString(sum[:])
			if status >= 200 && status < 300 {
				var o struct {
					ID, State string
					Version   int64
				}
				if jerr := json.Unmarshal(answer, &o); jerr != nil {
					ob.Err = "decoding: " + jerr.Error()
					return ob
				}
				ob.Definitive, ob.ResourceID, ob.State, ob.Version = true, o.ID, o.State, o.Version
				ob.Token = header.Get(consistencyHeader)
				return ob
			}
			var p struct{ Type string }
			_ = json.Unmarshal(answer, &p)
			ob.Code = p.Type[strings.LastIndex(p.Type, "/")+1:]
			if !retryableAnswer(status, ob.Code) {
				ob.Definitive = true
				return ob
			}
			if ra, perr := strconv.Atoi(header.Get("Retry-After")); perr == nil {
				wait = min(time.Duration(ra)*time.Second, s.maxWait)
			}
		}
		if attempt == s.attempts {
			break
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ob
		case <-t.C:
		}
	}
	return ob
}

// retryableAnswer mirrors the client's rule: these answers mean "same
// request again later".
func retryableAnswer(status int, code string) bool {
	switch status {
	case http.StatusTooManyRequests, http.StatusInternalServerError, http.StatusBadGateway,
		http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	case http.StatusConflict:
		return code == client.CodeKeyInProgress || code == client.CodeOrderBusy
	}
	return false
}

func (s *Sender) jitter(attempt int) time.Duration {
	ceil := min(s.backoff<<(attempt-1), s.maxWait)
	if ceil <= 0 {
		return 0
	}
	return time.Duration(rand.Int64N(int64(ceil) + 1))
}

func (s *Sender) rawOnce(ctx context.Context, url string, body []byte) (int, http.Header, []byte, error) {
	if s.attemptTO > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.attemptTO)
		defer cancel()
	}
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, r)
	if err != nil {
		return 0, nil, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+s.apiKey)
	req.Header.Set("User-Agent", "orderstorm/1 (keyless)")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := s.raw.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return 0, nil, nil, fmt.Errorf("reading the %d response: %w", resp.StatusCode, err)
	}
	return resp.StatusCode, resp.Header, b, nil
}

// consistencyHeader carries orderd's read-your-writes token (README, "Read
// replicas").
const consistencyHeader = "Orderly-Consistency-Token"

// Read is one GET /v1/orders/{id} as the harness saw it.
type Read struct {
	Status  int // 0: no answer after every attempt
	Version int64
	State   string
}

// Read gets order id from instance inst, with token (if not empty) as
// Orderly-Consistency-Token, retrying network failures and retryable
// answers up to the client's attempts.
func (s *Sender) Read(ctx context.Context, inst int, id, token string) Read {
	var rd Read
	for attempt := 1; attempt <= s.attempts; attempt++ {
		status, body, err := s.getOnce(ctx, s.bases[inst]+"/v1/orders/"+id, token)
		if err == nil {
			rd.Status = status
			if status == http.StatusOK {
				var o struct {
					State   string
					Version int64
				}
				if jerr := json.Unmarshal(body, &o); jerr == nil {
					rd.Version, rd.State = o.Version, o.State
					return rd
				}
				rd.Status = 0 // a torn body: try again
			} else if !retryableAnswer(status, "") {
				return rd
			}
		} else if ctx.Err() != nil {
			return Read{}
		}
		if attempt == s.attempts {
			break
		}
		t := time.NewTimer(s.jitter(attempt))
		select {
		case <-ctx.Done():
			t.Stop()
			return Read{}
		case <-t.C:
		}
	}
	if rd.Status == http.StatusOK || retryableAnswer(rd.Status, "") {
		rd.Status = 0
	}
	return rd
}

func (s *Sender) getOnce(ctx context.Context, url, token string) (int, []byte, error) {
	if s.attemptTO > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.attemptTO)
		defer cancel()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+s.apiKey)
	req.Header.Set("User-Agent", "orderstorm/1 (reads)")
	if token != "" {
		req.Header.Set(consistencyHeader, token)
	}
	resp, err := s.raw.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return 0, nil, err
	}
	return resp.StatusCode, b, nil
}

// CloseIdle closes idle connections.
func (s *Sender) CloseIdle() { s.raw.CloseIdleConnections() }

// payResponse is a pay's answer as the storm's book records every answer:
// the order (a 202's pending payment is not part of the book's model).
// refundResponse carries a partial refund's answer as an order answer: its
// resource the refund's id (as a keyless answer's "id"), no state and no
// version (a refund is not a transition).
func refundResponse(rr *client.Response[client.Refund]) *client.Response[order.Order] {
	if rr == nil {
		return nil
	}
	return &client.Response[order.Order]{Value: order.Order{ID: rr.Value.ID}, StatusCode: rr.StatusCode, Header: rr.Header,
		Replayed: rr.Replayed, IdempotencyKey: rr.IdempotencyKey, KeyExpiresAt: rr.KeyExpiresAt, Attempts: rr.Attempts}
}

func payResponse(pr *client.Response[client.PayResult]) *client.Response[order.Order] {
	if pr == nil {
		return nil
	}
	return &client.Response[order.Order]{Value: pr.Value.Order, StatusCode: pr.StatusCode, Header: pr.Header,
		Replayed: pr.Replayed, IdempotencyKey: pr.IdempotencyKey, KeyExpiresAt: pr.KeyExpiresAt, Attempts: pr.Attempts}
}
