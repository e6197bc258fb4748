package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/orderly/orderly/client"
	"github.com/orderly/orderly/cmd/orderstorm/internal/book"
	"github.com/orderly/orderly/order"
)

// Mix is the shape of the simulated traffic: probabilities per order or per
// operation.
type Mix struct {
	DoubleClick  float64 // an operation is sent twice without a key
	Parallel     float64 // an operation is sent with one key to several instances at once
	Replay       float64 // an order's whole sequence is re-sent afterwards
	MethodFaults float64 // a pay uses a paysim one-shot fault method
	SKUFaults    float64 // an order carries a paysim one-shot fault SKU (hits its shipment)
	OutOfStock   float64 // an order carries sku_out_of_stock (fulfilment is rejected)
	Decline      float64 // the first pay uses a declined card
	NewKeyRepeat float64 // a paid order is paid again with a new key
	CancelRCVD   float64 // an order is cancelled instead of paid
	Abandon      float64 // an order is left unpaid
	RacePayCncl  float64 // pay and cancel race on different instances
	RacePayFul   float64 // pay and fulfil race on different instances
	CancelPaid   float64 // a paid order is cancelled (refund)
	StopPaid     float64 // a paid order is left unfulfilled
	RaceFulCncl  float64 // a paid order gets fulfil and cancel at once on different instances
	Impatient    float64 // after a pay without an answer, the shopper pays again with a new key
	BusCommands  float64 // a keyed pay, fulfil or cancel is sent as a JetStream command (needs a Bus)
	BusTwin      float64 // a bus command is raced by an HTTP twin with the same key
	Reads        float64 // a successful answer is followed by a GET of the order (reads.go)
	Refunds      float64 // a paid order gets one to three partial refunds (before its cancel, after its fulfil, or left PAID)
	RaceRefunds  float64 // an order's partial refunds are sent all at once, to different instances
}

// DefaultMix is the default storm traffic.
var DefaultMix = Mix{
	DoubleClick: 0.15, Parallel: 0.15, Replay: 0.2, MethodFaults: 0.06, SKUFaults: 0.04, OutOfStock: 0.01,
	Decline: 0.04, NewKeyRepeat: 0.05, CancelRCVD: 0.08, Abandon: 0.04, RacePayCncl: 0.04, RacePayFul: 0.03,
	CancelPaid: 0.08, StopPaid: 0.05, RaceFulCncl: 0.04, Impatient: 0.5, BusTwin: 0.3, Reads: 0.2,
	Refunds: 0.2, RaceRefunds: 0.4,
}

// busWait bounds how long a shopper waits for a bus command's key to be
// completed before it reads the outcome back.
const busWait = 60 * time.Second

// Storm drives shoppers against the instances.
type Storm struct {
	Book      *book.Book
	Send      *Sender
	Instances int
	Mix       Mix
	Seed      uint64
	// Bus, if set, receives the operations Mix.BusCommands selects.
	Bus *Bus
	// BusLateAfter is how long after a bus command's read-back its late
	// redelivery is published: past orderd's duplicate window, so that the
	// copy reaches the idempotency ledger instead of being dropped by the
	// stream.
	BusLateAfter time.Duration

	late  sync.WaitGroup // late redeliveries still to publish
	reads readTally

	logical atomic.Int64 // logical operations started
	orders  atomic.Int64
	dups    sync.Map // via/kind → *atomic.Int64
	planned sync.Map // planned fault kind → *atomic.Int64
}

func (s *Storm) count(m *sync.Map, k string, n int64) {
	v, _ := m.LoadOrStore(k, new(atomic.Int64))
	v.(*atomic.Int64).Add(n)
}

func snapshot(m *sync.Map) map[string]int64 {
	out := map[string]int64{}
	m.Range(func(k, v any) bool {
		out[k.(string)] = v.(*atomic.Int64).Load()
		return true
	})
	return out
}

// Logical is how many logical operations were started.
func (s *Storm) Logical() int64 { return s.logical.Load() }

// Run runs shoppers until maxOps logical operations were started or
// stopAt, whichever first; orders in progress then finish, bounded by ctx.
func (s *Storm) Run(ctx context.Context, shoppers int, maxOps int64, stopAt time.Time) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := range shoppers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(s.Seed, uint64(w)+1)) //nolint:gosec // w is a shopper's index, never negative
			for ctx.Err() == nil && s.logical.Load() < maxOps && time.Now().Before(stopAt) {
				s.runOrder(ctx, rng, int(next.Add(1)))
			}
		})
	}
	wg.Wait()
}

// pick returns a random instance, and another one (the same when there is
// only one).
func (s *Storm) pick(rng *rand.Rand) (int, int) {
	a := rng.IntN(s.Instances)
	if s.Instances == 1 {
		return a, a
	}
	return a, (a + 1 + rng.IntN(s.Instances-1)) % s.Instances
}

type pattern int

const (
	single pattern = iota
	doubleClick
	parallel
)

// pattern draws how an operation is sent. Parallel duplicates need two
// instances or more: with one, their share is sent singly, so a report never
// counts parallel_instances that went to one instance.
func (s *Storm) pattern(rng *rand.Rand) pattern {
	switch x := rng.Float64(); {
	case x < s.Mix.DoubleClick:
		return doubleClick
	case x < s.Mix.DoubleClick+s.Mix.Parallel && s.Instances > 1:
		return parallel
	}
	return single
}

// newInput makes the order of logical create seq: a unique customer_id
// marker, one to three items, sometimes a fault SKU.
func (s *Storm) newInput(rng *rand.Rand, seq int) order.NewOrderInput {
	in := order.NewOrderInput{CustomerID: fmt.Sprintf("%s%07d", s.Book.MarkerPrefix(), seq), Currency: "USD"}
	for i := range 1 + rng.IntN(3) {
		in.Items = append(in.Items, order.Item{SKU: fmt.Sprintf("sku_%d_%d", i, rng.IntN(500)),
			Quantity: 1 + rng.Int64N(3), UnitPrice: 100 + rng.Int64N(9900)})
	}
	switch x := rng.Float64(); {
	case x < s.Mix.SKUFaults:
		sku := []string{"sku_fault_drop_after_commit", "sku_fault_503", "sku_fault_timeout"}[rng.IntN(3)]
		in.Items = append(in.Items, order.Item{SKU: sku, Quantity: 1, UnitPrice: 500})
		s.count(&s.planned, "paysim one-shot "+sku, 1)
	case x < s.Mix.SKUFaults+s.Mix.OutOfStock:
		in.Items = append(in.Items, order.Item{SKU: "sku_out_of_stock", Quantity: 1, UnitPrice: 500})
		s.count(&s.planned, "sku_out_of_stock", 1)
	}
	return in
}

// perform sends op with pattern p and returns a definitive answer, if any
// call got one.
func (s *Storm) perform(ctx context.Context, rng *rand.Rand, op *book.Op, p pattern) (book.Obs, bool) {
	if !op.Repeat {
		s.logical.Add(1)
	}
	a, b := s.pick(rng)
	if s.Bus != nil && op.Keyed && op.Kind != book.KindCreate && rng.Float64() < s.Mix.BusCommands {
		return s.viaBus(ctx, rng, op, a, b)
	}
	switch p {
	case doubleClick:
		var wg sync.WaitGroup
		wg.Go(func() { s.Send.Send(ctx, op, a, book.ViaPrimary) })
		delay := time.Duration(rng.IntN(30)) * time.Millisecond
		second := a
		if rng.IntN(2) == 0 {
			second = b
		}
		wg.Go(func() {
			time.Sleep(delay)
			s.Send.Send(ctx, op, second, book.ViaDoubleClick)
		})
		wg.Wait()
		s.count(&s.dups, book.ViaDoubleClick, 1)
	case parallel:
		n := max(2, s.Instances)
		gate := make(chan struct{})
		var wg sync.WaitGroup
		for i := range n {
			inst := (a + i) % s.Instances
			via := book.ViaPrimary
			if i > 0 {
				via = book.ViaParallel
			}
			wg.Go(func() {
				<-gate
				s.Send.Send(ctx, op, inst, via)
			})
		}
		close(gate)
		wg.Wait()
		s.count(&s.dups, book.ViaParallel, int64(n-1))
	default:
		s.Send.Send(ctx, op, a, book.ViaPrimary)
	}
	ob, ok := op.Definitive()
	if ok && rng.Float64() < s.Mix.Reads {
		s.readAfter(ctx, rng, op, ob)
	}
	return ob, ok
}

// viaBus sends op as a bus command: one to three copies with its key as
// Nats-Msg-Id (the stream drops those within its duplicate window, the
// ledger replays the rest), sometimes raced by an HTTP twin with the same
// key on instance b. Once the key is completed, the outcome is read back
// over HTTP with the key on instance a (it must be a replay: the command
// took effect), and sometimes one more copy follows BusLateAfter later, a
// late redelivery.
func (s *Storm) viaBus(ctx context.Context, rng *rand.Rand, op *book.Op, a, b int) (book.Obs, bool) {
	op.Bus = true
	s.Bus.commands.Add(1)
	copies := 1 + rng.IntN(3)
	gaps := make([]time.Duration, copies)
	for i := range gaps {
		gaps[i] = time.Duration(rng.IntN(40)) * time.Millisecond
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for _, gap := range gaps {
			time.Sleep(gap)
			if err := s.Bus.Publish(ctx, op); err != nil {
				s.count(&s.dups, "bus publish failed", 1)
			}
		}
	})
	if rng.Float64() < s.Mix.BusTwin {
		s.Bus.twins.Add(1)
		wg.Go(func() { s.Send.Send(ctx, op, b, book.ViaBusTwin) })
	}
	wg.Wait()
	s.count(&s.dups, "bus command copies", int64(copies))
	s.Send.awaitKeyCompleted(ctx, a, op.Key, busWait)
	s.Send.Send(ctx, op, a, book.ViaBus)
	if rng.IntN(2) == 0 {
		s.Bus.late.Add(1)
		s.late.Go(func() {
			t := time.NewTimer(s.BusLateAfter)
			defer t.Stop()
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if err := s.Bus.Publish(ctx, op); err != nil {
				s.count(&s.dups, "bus publish failed", 1)
			}
		})
	}
	return op.Definitive()
}

// WaitLate waits until every late redelivery is published.
func (s *Storm) WaitLate() { s.late.Wait() }

func (s *Storm) newOp(o *book.OrderRec, p pattern, spec book.OpSpec) *book.Op {
	spec.Keyed = p != doubleClick
	op, err := s.Book.NewOp(o, spec)
	if err != nil {
		panic(err) // only for an op on an order without an id, which the flows never make
	}
	return op
}

var (
	allowCreate     = []int{http.StatusCreated}
	allowPay        = []int{http.StatusOK, http.StatusPaymentRequired}
	allowPayRace    = []int{http.StatusOK, http.StatusPaymentRequired, http.StatusConflict}
	allowFulfil     = []int{http.StatusOK, http.StatusUnprocessableEntity}
	allowFulfilRace = []int{http.StatusOK, http.StatusConflict, http.StatusUnprocessableEntity}
	allowCancel     = []int{http.StatusOK}
	allowCancelRace = []int{http.StatusOK, http.StatusConflict}
	// allowRefund: a partial refund succeeds, or is a 409 (more than is
	// left: refund_exceeds_captured; an order the fulfil's refusal got
	// cancelled: invalid_transition).
	allowRefund    = []int{http.StatusOK, http.StatusConflict}
	paymentMethods = []string{"pm_fault_drop_after_commit", "pm_fault_503", "pm_fault_timeout"}
	declinedMethod = "pm_card_declined"
	approvedMethod = "pm_card_visa"
	maxPayAttempts = 3
)

// runOrder is one shopper's order: create, then one of the flows, then
// perhaps a replay of the whole sequence.
func (s *Storm) runOrder(ctx context.Context, rng *rand.Rand, seq int) {
	s.orders.Add(1)
	in := s.newInput(rng, seq)
	o := s.Book.NewOrder(seq, in)
	p := s.pattern(rng)
	create := s.newOp(o, p, book.OpSpec{Kind: book.KindCreate, Create: &in, Allowed: allowCreate})
	if ob, ok := s.perform(ctx, rng, create, p); !ok || ob.Status != http.StatusCreated || o.ID() == "" {
		return // left for the reconciler
	}
	switch x := rng.Float64(); {
	case x < s.Mix.CancelRCVD:
		s.cancel(ctx, rng, o, allowCancel, false)
	case x < s.Mix.CancelRCVD+s.Mix.Abandon:
	case x < s.Mix.CancelRCVD+s.Mix.Abandon+s.Mix.RacePayCncl:
		s.race(ctx, rng, o, book.KindCancel)
	case x < s.Mix.CancelRCVD+s.Mix.Abandon+s.Mix.RacePayCncl+s.Mix.RacePayFul:
		s.race(ctx, rng, o, book.KindFulfill)
	default:
		s.payFlow(ctx, rng, o)
	}
	if rng.Float64() < s.Mix.Replay {
		s.replaySequence(ctx, rng, o)
	}
}

func (s *Storm) payInput(o *book.OrderRec, method string) *client.PayInput {
	return &client.PayInput{Amount: o.Amount, Currency: o.Input.Currency, PaymentMethod: method}
}

// pay pays o until it is paid, declined maxPayAttempts times, or a pay has
// no definitive answer. It reports whether a pay answered 200.
func (s *Storm) pay(ctx context.Context, rng *rand.Rand, o *book.OrderRec) bool {
	method := approvedMethod
	switch x := rng.Float64(); {
	case x < s.Mix.Decline:
		method = declinedMethod
		s.count(&s.planned, "declined card (pm_card_declined)", 1)
	case x < s.Mix.Decline+s.Mix.MethodFaults:
		method = paymentMethods[rng.IntN(len(paymentMethods))]
		s.count(&s.planned, "paysim one-shot "+method, 1)
	}
	for range maxPayAttempts {
		p := s.pattern(rng)
		op := s.newOp(o, p, book.OpSpec{Kind: book.KindPay, Pay: s.payInput(o, method), Allowed: allowPay})
		ob, ok := s.perform(ctx, rng, op, p)
		switch {
		case !ok && rng.Float64() < s.Mix.Impatient:
			// No answer: the shopper reloads the page and pays again, with a
			// new key. Money must still move once. The abandoned pay now
			// races what the shopper does next (its answer, once the
			// reconciler gets one, may be a 409 for a cancelled order).
			s.count(&s.dups, "new_key_after_no_answer", 1)
			op.Race, op.Allowed = true, allowPayRace
			method = approvedMethod
		case !ok:
			return false
		case ob.Status == http.StatusOK:
			return true
		case ob.Status == http.StatusPaymentRequired:
			method = approvedMethod // another card, with a new key
		default:
			return false
		}
	}
	return false
}

// payFlow pays, then fulfils, cancels (refund) or stops.
func (s *Storm) payFlow(ctx context.Context, rng *rand.Rand, o *book.OrderRec) {
	if !s.pay(ctx, rng, o) {
		return
	}
	if rng.Float64() < s.Mix.NewKeyRepeat {
		// The shopper reloads the page and pays again: a new key, a no-op.
		op := s.newOp(o, single, book.OpSpec{Kind: book.KindPay, Pay: s.payInput(o, approvedMethod), Repeat: true,
			Allowed: []int{http.StatusOK}})
		s.perform(ctx, rng, op, single)
		s.count(&s.dups, "new_key_repeat", 1)
	}
	refunds := rng.Float64() < s.Mix.Refunds
	switch x := rng.Float64(); {
	case x < s.Mix.CancelPaid:
		if refunds {
			s.partialRefunds(ctx, rng, o) // then the cancel refunds what they left
		}
		s.cancel(ctx, rng, o, allowCancel, false)
	case x < s.Mix.CancelPaid+s.Mix.StopPaid:
		if refunds {
			s.partialRefunds(ctx, rng, o)
		}
	case x < s.Mix.CancelPaid+s.Mix.StopPaid+s.Mix.RaceFulCncl:
		s.raceFulfilCancel(ctx, rng, o)
	default:
		p := s.pattern(rng)
		op := s.newOp(o, p, book.OpSpec{Kind: book.KindFulfill, Allowed: allowFulfil})
		if ob, ok := s.perform(ctx, rng, op, p); ok && ob.Status == http.StatusUnprocessableEntity && rng.IntN(2) == 0 {
			s.cancel(ctx, rng, o, allowCancel, false) // out of stock: refund
		} else if refunds {
			s.partialRefunds(ctx, rng, o) // returns
		}
	}
}

// partialRefunds sends one to three partial refunds of o (issue 16), each
// of up to half the order's amount under its own key (and a reason of its
// own, so keyless ones derive keys of their own), sometimes all at once to
// different instances: together they may ask more than was captured,
// which the server refuses (409 refund_exceeds_captured) rather than
// refund.
func (s *Storm) partialRefunds(ctx context.Context, rng *rand.Rand, o *book.OrderRec) {
	n := 1 + rng.IntN(3)
	ops := make([]*book.Op, n)
	pats := make([]pattern, n)
	for i := range ops {
		in := &client.RefundInput{Amount: 1 + rng.Int64N(max(1, o.Amount/2)), Currency: o.Input.Currency,
			Reason: fmt.Sprintf("storm return %d", i+1)}
		pats[i] = s.pattern(rng)
		ops[i] = s.newOp(o, pats[i], book.OpSpec{Kind: book.KindRefund, Refund: in, Allowed: allowRefund})
	}
	s.count(&s.dups, "partial refunds", int64(n))
	if n == 1 || rng.Float64() >= s.Mix.RaceRefunds {
		for i, op := range ops {
			s.perform(ctx, rng, op, pats[i])
		}
		return
	}
	s.count(&s.dups, "racing partial refunds", int64(n))
	gate := make(chan struct{})
	var wg sync.WaitGroup
	for i, op := range ops {
		r := rand.New(rand.NewPCG(rng.Uint64(), uint64(i)+5)) //nolint:gosec // i is an index, never negative
		wg.Go(func() { <-gate; s.perform(ctx, r, op, pats[i]) })
	}
	close(gate)
	wg.Wait()
}

func (s *Storm) cancel(ctx context.Context, rng *rand.Rand, o *book.OrderRec, allowed []int, race bool) (book.Obs, bool) {
	p := s.pattern(rng)
	op := s.newOp(o, p, book.OpSpec{Kind: book.KindCancel, Allowed: allowed, Race: race})
	return s.perform(ctx, rng, op, p)
}

// race sends a pay and another event (cancel or fulfil) on o at the same
// moment to different instances; a fulfil that lost is sent again once the
// order is paid.
func (s *Storm) race(ctx context.Context, rng *rand.Rand, o *book.OrderRec, other string) {
	s.count(&s.dups, "race pay+"+other, 1)
	payOp := s.newOp(o, single, book.OpSpec{Kind: book.KindPay, Pay: s.payInput(o, approvedMethod), Allowed: allowPayRace, Race: true})
	allowed := allowCancelRace
	if other == book.KindFulfill {
		allowed = allowFulfilRace
	}
	otherOp := s.newOp(o, single, book.OpSpec{Kind: other, Allowed: allowed, Race: true})
	gate := make(chan struct{})
	var wg sync.WaitGroup
	var payOb, otherOb book.Obs
	var payOK, otherOK bool
	r1, r2 := rand.New(rand.NewPCG(rng.Uint64(), 1)), rand.New(rand.NewPCG(rng.Uint64(), 2))
	wg.Go(func() { <-gate; payOb, payOK = s.perform(ctx, r1, payOp, single) })
	wg.Go(func() { <-gate; otherOb, otherOK = s.perform(ctx, r2, otherOp, single) })
	close(gate)
	wg.Wait()
	if other == book.KindFulfill && payOK && payOb.Status == http.StatusOK && otherOK && otherOb.Status == http.StatusConflict {
		op := s.newOp(o, single, book.OpSpec{Kind: book.KindFulfill, Allowed: allowFulfil})
		s.perform(ctx, rng, op, single)
	}
}

// raceFulfilCancel sends fulfil and cancel on a paid order at the same
// moment to different instances: a shipment and a refund must never both
// happen.
func (s *Storm) raceFulfilCancel(ctx context.Context, rng *rand.Rand, o *book.OrderRec) {
	s.count(&s.dups, "race fulfill+cancel", 1)
	ful := s.newOp(o, single, book.OpSpec{Kind: book.KindFulfill, Allowed: allowFulfilRace, Race: true})
	cnl := s.newOp(o, single, book.OpSpec{Kind: book.KindCancel, Allowed: allowCancelRace, Race: true})
	r1, r2 := rand.New(rand.NewPCG(rng.Uint64(), 3)), rand.New(rand.NewPCG(rng.Uint64(), 4))
	gate := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { <-gate; s.perform(ctx, r1, ful, single) })
	wg.Go(func() { <-gate; s.perform(ctx, r2, cnl, single) })
	close(gate)
	wg.Wait()
}

// replaySequence re-sends every operation of o that has a stored outcome,
// in order, with its key (or its body again, for keyless ones): every answer
// must be a replay equal to the original.
func (s *Storm) replaySequence(ctx context.Context, rng *rand.Rand, o *book.OrderRec) {
	for _, op := range o.Ops() {
		first, ok := op.Definitive()
		if !ok || !first.Stored() {
			continue
		}
		inst, _ := s.pick(rng)
		s.Send.Send(ctx, op, inst, book.ViaSequenceReplay)
		s.count(&s.dups, book.ViaSequenceReplay, 1)
	}
}

// Reconcile re-sends every operation without a definitive answer, with its
// key, in rounds until each has one or until stop. It returns how many were
// unresolved before and after.
func (s *Storm) Reconcile(ctx context.Context, stop time.Time, conc int) (before, after int) {
	first := true
	for {
		var pending []*book.Op
		for _, op := range s.Book.AllOps() {
			if _, ok := op.Definitive(); !ok {
				pending = append(pending, op)
			}
		}
		if first {
			before, first = len(pending), false
		}
		if len(pending) == 0 || time.Now().After(stop) || ctx.Err() != nil {
			return before, len(pending)
		}
		sem := make(chan struct{}, conc)
		var wg sync.WaitGroup
		for i, op := range pending {
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				s.Send.Send(ctx, op, i%s.Instances, book.ViaReconcile)
				s.count(&s.dups, book.ViaReconcile, 1)
			})
		}
		wg.Wait()
		t := time.NewTimer(time.Second)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
	}
}
