package service

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/orderly/orderly/store"
)

// Group commit defaults (Config.GroupCommitMaxBatch, GroupCommitWorkers):
// two groups in flight, one on a store.SerialWriter.
const (
	DefaultGroupCommitMaxBatch      = 64
	DefaultGroupCommitWorkers       = 2
	DefaultSerialGroupCommitWorkers = 1
)

// groupTimeout bounds one group's transaction. The requests in it keep their
// own deadlines: one whose deadline passes stops waiting (a retry with the
// same key finds out what happened).
const groupTimeout = 15 * time.Second

// groupCommit coalesces concurrent creates into groups written by
// store.CreateOrders: one multi-row statement in one transaction, one commit
// (and on SQLite one fsync) for the group. A worker takes the first create
// that arrives, then every create already waiting, up to the bound, and
// writes them; while it writes, new creates wait for the next group. An
// idle server therefore adds no wait: a lone create is a group of one.
//
// Each create keeps its own semantics: its own key claim, replay and
// errors. Two creates with the same key in one group are resolved here,
// before the store sees them: the first claims, the others are answered
// with its record (a replay, or a 422 for another fingerprint), exactly as
// if they had arrived just after it. A group that fails as a whole (a
// constraint, a lost connection) is retried one create at a time, so one
// bad create never fails the others.
type groupCommit struct {
	store    store.Store
	max      int
	n        int // workers
	in       chan *createCall
	done     chan struct{}
	workers  sync.WaitGroup
	stopOnce sync.Once
	stages   StageObserver // nil: stages are not timed
}

// createCall is one create waiting for its group.
type createCall struct {
	ctx  context.Context
	req  store.NewOrder
	done chan createResult
	at   time.Time // when it arrived (timed only with a StageObserver)
}

type createResult struct {
	held *store.Holder
	err  error
}

func newGroupCommit(st store.Store, maxBatch, workers int) *groupCommit {
	if maxBatch <= 0 {
		maxBatch = DefaultGroupCommitMaxBatch
	}
	if workers <= 0 {
		workers = DefaultGroupCommitWorkers
		if _, serial := st.(store.SerialWriter); serial {
			// A second worker would gather its group at once and then
			// wait for the first's write; one worker gathers every create
			// that arrived during that write (on SQLite at 16 clients,
			// groups of 6–7 instead of 4–5, BENCHMARKS.md).
			workers = DefaultSerialGroupCommitWorkers
		}
	}
	g := &groupCommit{store: st, max: maxBatch, n: workers, in: make(chan *createCall), done: make(chan struct{})}
	for range workers {
		g.workers.Add(1)
		go g.work()
	}
	return g
}

// do creates req in the next group and returns what store.CreateOrder
// would: nil when created, or the key's holder.
func (g *groupCommit) do(ctx context.Context, req store.NewOrder) (*store.Holder, error) {
	c := &createCall{ctx: ctx, req: req, done: make(chan createResult, 1)}
	if g.stages != nil {
		c.at = time.Now()
	}
	select {
	case g.in <- c:
	case <-g.done:
		return nil, store.Unavailable(errShuttingDown)
	case <-ctx.Done():
		return nil, store.Unavailable(ctx.Err())
	}
	select {
	case r := <-c.done:
		return r.held, r.err
	case <-ctx.Done():
		return nil, store.Unavailable(ctx.Err())
	}
}

// close stops the workers after the groups in flight are written.
func (g *groupCommit) close() {
	g.stopOnce.Do(func() { close(g.done) })
	g.workers.Wait()
}

func (g *groupCommit) work() {
	defer g.workers.Done()
	for {
		var first *createCall
		select {
		case first = <-g.in:
		case <-g.done:
			return
		}
		group := []*createCall{first}
	gather:
		for len(group) < g.max {
			select {
			case c := <-g.in:
				group = append(group, c)
			default:
				break gather
			}
		}
		g.write(group)
	}
}

// keyID names a key within a group.
type keyID struct{ tenant, hash string }

// write writes one group and answers each of its creates.
func (g *groupCommit) write(group []*createCall) {
	var unique []store.NewOrder
	claimant := make([]int, len(group)) // index into unique of the create that claims c's key
	firstWith := map[keyID]int{}
	for i, c := range group {
		if k := c.req.Key; k != nil {
			id := keyID{k.TenantID, k.KeyHash}
			if u, ok := firstWith[id]; ok {
				claimant[i] = u
				continue
			}
			firstWith[id] = len(unique)
		}
		claimant[i] = len(unique)
		unique = append(unique, c.req)
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(group[0].ctx), groupTimeout)
	defer cancel()
	if g.stages != nil {
		start := time.Now()
		oldest := start
		for _, c := range group {
			if !c.at.IsZero() && c.at.Before(oldest) {
				oldest = c.at
			}
		}
		defer func() { g.stages.GroupCommit(len(group), start.Sub(oldest), time.Since(start)) }()
	}
	if len(group) == 1 {
		// A lone create (an idle or lightly loaded server): the store's
		// one-create statement, which binds scalars where CreateOrders
		// binds a one-element array per column and reads the holders in a
		// second statement (issue 19: a third of a lone create's or
		// replay's allocations). Same answer, same round trip and commit.
		h, err := g.store.CreateOrder(ctx, group[0].req.Key, group[0].req.Order)
		group[0].done <- createResult{h, err}
		return
	}
	held, err := g.store.CreateOrders(ctx, unique)
	if err != nil {
		// The group failed as a whole: each create on its own, in arrival
		// order, so duplicates resolve through the store as usual.
		for _, c := range group {
			h, err := g.store.CreateOrder(c.ctx, c.req.Key, c.req.Order)
			c.done <- createResult{h, err}
		}
		return
	}
	answered := make([]bool, len(unique))
	for i, c := range group {
		u := claimant[i]
		if !answered[u] {
			answered[u] = true
			c.done <- createResult{held: held[u]}
			continue
		}
		// A duplicate of a create earlier in this group: it sees that
		// create's key as a later request would.
		h := held[u]
		if h == nil {
			won := unique[u]
			// The winner's key as stored: CreateOrders set its times on
			// the database's clock, which then read CreatedAt.
			h = &store.Holder{Record: won.Key.Record, Order: &won.Order, Now: won.Key.CreatedAt}
		}
		c.done <- createResult{held: h}
	}
}

// errShuttingDown is the cause of creates refused after Close.
var errShuttingDown = errors.New("service: shutting down")
