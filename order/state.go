package order

// State is an order's lifecycle state. The set is closed: the database
// constrains the column to these values.
type State string

// Order states.
const (
	// Received: created, not yet paid. The initial state.
	Received State = "RCVD"
	// Paid: the charge was captured.
	Paid State = "PAID"
	// Fulfilled: the warehouse shipped the order. Terminal.
	Fulfilled State = "FULFILLED"
	// Cancelled: cancelled before fulfilment — from RCVD, or from PAID
	// once the charge has been refunded. Terminal.
	Cancelled State = "CANCELLED"
)

// States lists every State.
var States = []State{Received, Paid, Fulfilled, Cancelled}

// Valid reports whether s is one of States.
func (s State) Valid() bool {
	for _, v := range States {
		if s == v {
			return true
		}
	}
	return false
}

// Event is something that may move an order between states.
type Event string

// Order events.
const (
	EventPay     Event = "pay"
	EventFulfill Event = "fulfill"
	EventCancel  Event = "cancel"
)

// Events lists every Event.
var Events = []Event{EventPay, EventFulfill, EventCancel}
