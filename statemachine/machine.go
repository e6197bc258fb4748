package statemachine

import (
	"context"

	"github.com/looplab/fsm"

	"github.com/orderly/orderly/apperr"
	"github.com/orderly/orderly/order"
)

// Outcome is the kind of a Decision.
type Outcome int

const (
	// Transition: the event moves the order to Decision.To.
	Transition Outcome = iota + 1
	// NoOp: the event's effect already holds; nothing changes.
	NoOp
)

// Decision is what an event does to an order in a given state.
type Decision struct {
	Outcome Outcome
	From    order.State
	To      order.State // equals From for NoOp
}

// transitions are the machine's edges, in looplab/fsm's form.
var transitions = fsm.Events{
	{Name: string(order.EventPay), Src: []string{string(order.Received)}, Dst: string(order.Paid)},
	{Name: string(order.EventFulfill), Src: []string{string(order.Paid)}, Dst: string(order.Fulfilled)},
	{Name: string(order.EventCancel), Src: []string{string(order.Received), string(order.Paid)}, Dst: string(order.Cancelled)},
}

// satisfied lists, for each event, the states in which its effect already
// holds, making the event a no-op.
var satisfied = map[order.Event][]order.State{
	order.EventPay:     {order.Paid, order.Fulfilled},
	order.EventFulfill: {order.Fulfilled},
	order.EventCancel:  {order.Cancelled},
}

// Decide returns what event does to an order in state from. It returns an
// *apperr.Error with code EInvalidTransition naming the state and the event
// when the event is neither allowed nor already satisfied, and one with code
// EInvalid for an unknown state or event.
func Decide(from order.State, event order.Event) (Decision, error) {
	if !from.Valid() {
		return Decision{}, apperr.Errorf(apperr.EInvalid, "unknown order state %q", from)
	}
	if _, ok := satisfied[event]; !ok {
		return Decision{}, apperr.Errorf(apperr.EInvalid, "unknown event %q", event)
	}
	for _, s := range satisfied[event] {
		if s == from {
			return Decision{Outcome: NoOp, From: from, To: from}, nil
		}
	}
	m := fsm.NewFSM(string(from), transitions, nil)
	if err := m.Event(context.Background(), string(event)); err != nil {
		return Decision{}, invalid(from, event)
	}
	return Decision{Outcome: Transition, From: from, To: order.State(m.Current())}, nil
}

func invalid(from order.State, event order.Event) error {
	return apperr.Errorf(apperr.EInvalidTransition, "cannot %s an order in state %s", event, from)
}
