package statemachine_test

import (
	"fmt"
	"testing"

	"github.com/orderly/orderly/apperr"
	"github.com/orderly/orderly/order"
	"github.com/orderly/orderly/statemachine"
)

// TestDecideEveryStateAndEvent pins the whole machine: every state × event.
func TestDecideEveryStateAndEvent(t *testing.T) {
	const invalid = statemachine.Outcome(0)
	tests := []struct {
		from    order.State
		event   order.Event
		outcome statemachine.Outcome
		to      order.State
	}{
		{order.Received, order.EventPay, statemachine.Transition, order.Paid},
		{order.Received, order.EventFulfill, invalid, ""},
		{order.Received, order.EventCancel, statemachine.Transition, order.Cancelled},
		{order.Paid, order.EventPay, statemachine.NoOp, order.Paid},
		{order.Paid, order.EventFulfill, statemachine.Transition, order.Fulfilled},
		{order.Paid, order.EventCancel, statemachine.Transition, order.Cancelled},
		{order.Fulfilled, order.EventPay, statemachine.NoOp, order.Fulfilled},
		{order.Fulfilled, order.EventFulfill, statemachine.NoOp, order.Fulfilled},
		{order.Fulfilled, order.EventCancel, invalid, ""},
		{order.Cancelled, order.EventPay, invalid, ""},
		{order.Cancelled, order.EventFulfill, invalid, ""},
		{order.Cancelled, order.EventCancel, statemachine.NoOp, order.Cancelled},
	}
	if len(tests) != len(order.States)*len(order.Events) {
		t.Fatalf("the table has %d rows; every state × event needs one", len(tests))
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s on %s", tt.event, tt.from), func(t *testing.T) {
			d, err := statemachine.Decide(tt.from, tt.event)
			if tt.outcome == invalid {
				if apperr.ErrorCode(err) != apperr.EInvalidTransition {
					t.Fatalf("Decide = %+v, %v; want an EInvalidTransition error", d, err)
				}
				want := fmt.Sprintf("invalid_transition: cannot %s an order in state %s", tt.event, tt.from)
				if err.Error() != want {
					t.Errorf("error = %q, want %q", err, want)
				}
				return
			}
			if err != nil {
				t.Fatalf("Decide: %v", err)
			}
			if d.Outcome != tt.outcome || d.From != tt.from || d.To != tt.to {
				t.Errorf("Decide = %+v, want outcome %v to %s", d, tt.outcome, tt.to)
			}
		})
	}
}

func TestDecideRejectsUnknownStateAndEvent(t *testing.T) {
	if _, err := statemachine.Decide("SHIPPED", order.EventPay); apperr.ErrorCode(err) != apperr.EInvalid {
		t.Errorf("unknown state: err = %v, want EInvalid", err)
	}
	if _, err := statemachine.Decide(order.Received, "refund"); apperr.ErrorCode(err) != apperr.EInvalid {
		t.Errorf("unknown event: err = %v, want EInvalid", err)
	}
}

func ExampleDecide() {
	d, _ := statemachine.Decide(order.Received, order.EventPay)
	fmt.Println(d.From, "->", d.To)
	d, _ = statemachine.Decide(order.Paid, order.EventPay)
	fmt.Println(d.Outcome == statemachine.NoOp)
	_, err := statemachine.Decide(order.Cancelled, order.EventPay)
	fmt.Println(err)
	// Output:
	// RCVD -> PAID
	// true
	// invalid_transition: cannot pay an order in state CANCELLED
}
