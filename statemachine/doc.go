// Package statemachine decides order transitions with github.com/looplab/fsm.
//
//	RCVD --pay--> PAID --fulfill--> FULFILLED
//	RCVD --cancel--> CANCELLED
//	PAID --cancel--> CANCELLED (the charge is refunded first)
//
// Decide is a pure function of (state, event): a machine is built for each
// decision and never outlives it, because the database, not a process, holds
// the truth. The store then writes the decision as a compare-and-set update
// guarded by the version that was read; a lost race re-reads and decides again.
//
// An event whose effect already holds (pay on PAID or FULFILLED, fulfill on
// FULFILLED, cancel on CANCELLED) is a no-op, so repeated requests are
// harmless. For every other event the machine does not allow, Decide returns
// an *apperr.Error with code apperr.EInvalidTransition (a 409), and for an
// unknown state or event one with code apperr.EInvalid. docs/state_machine.md
// draws the machine.
package statemachine
