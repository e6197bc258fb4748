// Package hooks is orderstorm's webhook receiver: a loopback endpoint that
// registers itself with orderd for every event type, verifies each
// delivery's signature, and keeps every delivery in arrival order for the
// checks after the storm (package check).
package hooks

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/orderly/orderly/event"
)

// Delivery is one webhook request as received.
type Delivery struct {
	EventID  string
	Event    event.Event
	SigValid bool
	// Header says whether the Orderly-Event-Id header named the body's id.
	HeaderOK bool
}

// Receiver is a running webhook endpoint.
type Receiver struct {
	srv    *http.Server
	url    string
	mu     sync.Mutex
	secret string
	got    []Delivery
}

// Start listens on a loopback port and serves deliveries.
func Start() (*Receiver, error) {
	ln, err := new(net.ListenConfig).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r := &Receiver{url: "http://" + ln.Addr().String() + "/orderly"}
	r.srv = &http.Server{Handler: http.HandlerFunc(r.serve), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = r.srv.Serve(ln) }()
	return r, nil
}

func (r *Receiver) serve(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(io.LimitReader(req.Body, 1<<20))
	if err != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	d := Delivery{EventID: req.Header.Get(event.EventIDHeader)}
	// The age check is left out: a storm's deliveries may wait in retries
	// longer than a receiver's tolerance; the HMAC is what is checked.
	d.SigValid = r.secret != "" && event.Verify(r.secret, req.Header.Get(event.SignatureHeader), body, time.Time{}, 0) == nil
	if err := json.Unmarshal(body, &d.Event); err != nil {
		d.SigValid = false
	}
	d.HeaderOK = d.EventID == d.Event.ID
	r.got = append(r.got, d)
	w.WriteHeader(http.StatusNoContent)
}

// Register creates an endpoint for every event type on the orderd at base
// with apiKey and keeps its secret.
func (r *Receiver) Register(ctx context.Context, base, apiKey string) error {
	b, _ := json.Marshal(map[string]any{"url": r.url, "events": event.Types})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/webhook-endpoints", bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+apiKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var ep event.Endpoint
	if err := json.NewDecoder(resp.Body).Decode(&ep); err != nil || resp.StatusCode != http.StatusCreated || ep.Secret == "" {
		return fmt.Errorf("registering the webhook endpoint: HTTP %d (%v); does orderd run with ORDERD_WEBHOOK_ALLOW_PRIVATE=true?", resp.StatusCode, err)
	}
	r.mu.Lock()
	r.secret = ep.Secret
	r.mu.Unlock()
	return nil
}

// Deliveries returns what was received so far, in arrival order.
func (r *Receiver) Deliveries() []Delivery {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Delivery(nil), r.got...)
}

// Close stops the receiver.
func (r *Receiver) Close() error { return r.srv.Close() }
