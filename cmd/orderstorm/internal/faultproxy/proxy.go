package faultproxy

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Fates are the per-request probabilities of the proxy's faults. Their sum
// must be at most 1; the rest of the requests pass untouched.
type Fates struct {
	// Drop forwards the request, then swallows the reply: the client
	// connection is closed when the first byte of the response arrives, so
	// the request took effect and the client cannot know.
	Drop float64 `json:"drop_response"`
	// Cut resets the client connection when the request starts, before
	// anything is forwarded: the request never reaches the server.
	Cut float64 `json:"cut"`
	// Truncate forwards the request and half of the first chunk of the
	// reply, then closes the connection: a reply torn mid-way.
	Truncate float64 `json:"truncate"`
}

// Validate reports whether f holds probabilities summing to at most 1.
func (f Fates) Validate() error {
	for _, v := range []float64{f.Drop, f.Cut, f.Truncate} {
		if !(v >= 0 && v <= 1) {
			return fmt.Errorf("proxy fault rates must be in [0, 1], not %v", v)
		}
	}
	if f.Drop+f.Cut+f.Truncate > 1+1e-9 {
		return errors.New("proxy fault rates must sum to at most 1")
	}
	return nil
}

// Any reports whether f injects anything.
func (f Fates) Any() bool { return f.Drop+f.Cut+f.Truncate > 0 }

type fate int

const (
	fatePass fate = iota
	fateDrop
	fateCut
	fateTruncate
)

// Stats counts what a Proxy saw and did.
type Stats struct {
	Conns      int64 `json:"connections"`
	Requests   int64 `json:"requests"`
	Dropped    int64 `json:"dropped_responses"`
	Cut        int64 `json:"cut_connections"`
	Truncated  int64 `json:"truncated_responses"`
	DialFailed int64 `json:"backend_dial_failures"`
}

// Add returns the sum of s and o.
func (s Stats) Add(o Stats) Stats {
	return Stats{s.Conns + o.Conns, s.Requests + o.Requests, s.Dropped + o.Dropped,
		s.Cut + o.Cut, s.Truncated + o.Truncated, s.DialFailed + o.DialFailed}
}

// Faults is how many faults s counts.
func (s Stats) Faults() int64 { return s.Dropped + s.Cut + s.Truncated }

// Proxy is a TCP proxy on a loopback port in front of one HTTP/1.1 server.
// It tells requests apart on a keep-alive connection by direction: bytes
// from the client after a response began (or first on the connection) start
// a new request, which draws its fate. That holds for clients that do not
// pipeline, such as net/http's.
type Proxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	rng   *rand.Rand
	fates Fates
	conns map[net.Conn]struct{}

	conns64, requests, dropped, cut, truncated, dialFailed atomic.Int64

	closed atomic.Bool
	wg     sync.WaitGroup
}

// New listens on 127.0.0.1 (a free port) and forwards to target
// (host:port), with fates drawn from a source seeded with seed.
func New(target string, fates Fates, seed uint64) (*Proxy, error) {
	if err := fates.Validate(); err != nil {
		return nil, err
	}
	ln, err := new(net.ListenConfig).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, fates: fates, rng: rand.New(rand.NewPCG(seed, 0x6f7264657273746d)),
		conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// URL is the proxy's http:// base URL.
func (p *Proxy) URL() string { return "http://" + p.Addr() }

// SetFates replaces the fault rates (invalid ones are ignored).
func (p *Proxy) SetFates(f Fates) {
	if f.Validate() != nil {
		return
	}
	p.mu.Lock()
	p.fates = f
	p.mu.Unlock()
}

// Stats returns the counters so far.
func (p *Proxy) Stats() Stats {
	return Stats{Conns: p.conns64.Load(), Requests: p.requests.Load(), Dropped: p.dropped.Load(),
		Cut: p.cut.Load(), Truncated: p.truncated.Load(), DialFailed: p.dialFailed.Load()}
}

// Close stops accepting, closes every open connection and waits for the
// proxy's goroutines.
func (p *Proxy) Close() error {
	if p.closed.Swap(true) {
		return nil
	}
	err := p.ln.Close()
	p.mu.Lock()
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
	return err
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if p.closed.Load() {
				return
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				time.Sleep(10 * time.Millisecond)
				continue
			}
			return
		}
		p.conns64.Add(1)
		p.wg.Add(1)
		go p.serve(c)
	}
}

func (p *Proxy) track(c net.Conn, on bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if on {
		if p.closed.Load() {
			return false
		}
		p.conns[c] = struct{}{}
	} else {
		delete(p.conns, c)
	}
	return true
}

func (p *Proxy) draw() fate {
	p.mu.Lock()
	defer p.mu.Unlock()
	f := p.fates
	if !f.Any() {
		return fatePass
	}
	x := p.rng.Float64()
	for _, c := range []struct {
		fate fate
		rate float64
	}{{fateCut, f.Cut}, {fateDrop, f.Drop}, {fateTruncate, f.Truncate}} {
		if x < c.rate {
			return c.fate
		}
		x -= c.rate
	}
	return fatePass
}

// exchange is the state of one proxied connection.
type exchange struct {
	mu   sync.Mutex
	idle bool // no request in flight: the next client bytes start one
	fate fate // the fate of the request in flight
}

func (p *Proxy) serve(c net.Conn) {
	defer p.wg.Done()
	if !p.track(c, true) {
		_ = c.Close()
		return
	}
	defer p.track(c, false)
	d := net.Dialer{Timeout: 2 * time.Second}
	b, err := d.DialContext(context.Background(), "tcp", p.target)
	if err != nil {
		p.dialFailed.Add(1)
		_ = c.Close()
		return
	}
	if !p.track(b, true) {
		_ = c.Close()
		_ = b.Close()
		return
	}
	defer p.track(b, false)
	x := &exchange{idle: true}
	var once sync.Once
	closeBoth := func() {
		once.Do(func() {
			_ = c.Close()
			_ = b.Close()
		})
	}
	done := make(chan struct{})
	go func() { // client → backend
		defer close(done)
		defer closeBoth()
		buf := make([]byte, 32<<10)
		for {
			n, err := c.Read(buf)
			if n > 0 {
				x.mu.Lock()
				if x.idle {
					x.idle = false
					x.fate = p.draw()
					p.requests.Add(1)
				}
				f := x.fate
				x.mu.Unlock()
				if f == fateCut {
					p.cut.Add(1)
					if tc, ok := c.(*net.TCPConn); ok {
						_ = tc.SetLinger(0) // a reset, not an orderly close
					}
					return
				}
				if _, err := b.Write(buf[:n]); err != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	// backend → client
	buf := make([]byte, 32<<10)
	for {
		n, err := b.Read(buf)
		if n > 0 {
			x.mu.Lock()
			f := x.fate
			x.fate, x.idle = fatePass, true
			x.mu.Unlock()
			switch f {
			case fateDrop:
				p.dropped.Add(1)
				closeBoth()
				<-done
				return
			case fateTruncate:
				p.truncated.Add(1)
				_, _ = c.Write(buf[:n/2])
				closeBoth()
				<-done
				return
			}
			if _, werr := c.Write(buf[:n]); werr != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	closeBoth()
	<-done
}
