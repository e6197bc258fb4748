package paysim

import (
	"time"

	"github.com/orderly/orderly/paysim/paysimwire"
	"github.com/orderly/orderly/paysim/testmode"
)

// Test payment methods and SKUs understood by paysim. Every other non-empty
// payment method is approved and every other SKU is in stock. Those that
// decline or are out of stock are package testmode's, shared with the
// in-process simulators; the fault methods and SKUs are paysim's own.
const (
	// MethodDeclined is declined with code DeclineCardDeclined.
	MethodDeclined = testmode.MethodDeclined
	// MethodInsufficientFunds is declined with code
	// DeclineInsufficientFunds.
	MethodInsufficientFunds = testmode.MethodInsufficientFunds
	// MethodRefundFail is approved; its charge's refunds succeed and fail
	// later on POST /admin/refunds/{id}/fail (refund.failed is sent).
	MethodRefundFail = testmode.MethodRefundFail

	// MethodFaultDropAfterCommit captures the charge, then drops the reply
	// (the connection closes without a response). First request per key
	// only.
	MethodFaultDropAfterCommit = "pm_fault_drop_after_commit"
	// MethodFault503 answers 503 and captures nothing. First request per
	// key only.
	MethodFault503 = "pm_fault_503"
	// MethodFaultTimeout sleeps for the run's timeout delay (or until the
	// client goes away), answers 504 and captures nothing. First request per
	// key only.
	MethodFaultTimeout = "pm_fault_timeout"
	// MethodFaultLatency adds MethodLatency to every request that names it.
	MethodFaultLatency = "pm_fault_latency"

	// SKUOutOfStock is never in stock: a shipment containing it fails for
	// good with 409 out_of_stock, and the failure is remembered under the
	// key.
	SKUOutOfStock = testmode.SKUOutOfStock
	// SKUFaultDropAfterCommit makes a shipment behave like
	// MethodFaultDropAfterCommit.
	SKUFaultDropAfterCommit = "sku_fault_drop_after_commit"
	// SKUFault503 makes a shipment behave like MethodFault503.
	SKUFault503 = "sku_fault_503"
	// SKUFaultTimeout makes a shipment behave like MethodFaultTimeout.
	SKUFaultTimeout = "sku_fault_timeout"
	// SKUFaultLatency makes a shipment behave like MethodFaultLatency.
	SKUFaultLatency = "sku_fault_latency"

	// MethodLatency is the delay added by MethodFaultLatency and
	// SKUFaultLatency.
	MethodLatency = 2 * time.Second
)

// Decline codes carried in a 402's error.code, package testmode's.
const (
	// DeclineCardDeclined is the generic decline (MethodDeclined, the
	// "decline" fault).
	DeclineCardDeclined = testmode.DeclineCardDeclined
	// DeclineInsufficientFunds is the decline of MethodInsufficientFunds.
	DeclineInsufficientFunds = testmode.DeclineInsufficientFunds
	// DeclineInvalidPaymentMethod is the decline of an empty payment
	// method.
	DeclineInvalidPaymentMethod = testmode.DeclineInvalidPaymentMethod
)

// Wire types of the API, package paysimwire's (shared with the client, so
// that the client links no server).
type (
	ChargeStatus   = paysimwire.ChargeStatus
	ShipmentStatus = paysimwire.ShipmentStatus
	Charge         = paysimwire.Charge
	ChargeParams   = paysimwire.ChargeParams
	Refund         = paysimwire.Refund
	RefundParams   = paysimwire.RefundParams
	Item           = paysimwire.Item
	Shipment       = paysimwire.Shipment
	ShipmentParams = paysimwire.ShipmentParams
	WebhookEvent   = paysimwire.WebhookEvent
	WebhookData    = paysimwire.WebhookData
	Intent         = paysimwire.Intent
	IntentParams   = paysimwire.IntentParams
	ConfirmParams  = paysimwire.ConfirmParams
	CaptureParams  = paysimwire.CaptureParams
	RefundList     = paysimwire.RefundList
)

// Statuses, package paysimwire's; the ledger's CHECK constraints hold the
// same sets.
const (
	ChargeCaptured     = paysimwire.ChargeCaptured
	ChargeRefunded     = paysimwire.ChargeRefunded
	ChargeFailed       = paysimwire.ChargeFailed
	ChargeAuthorized   = paysimwire.ChargeAuthorized
	ShipmentShipped    = paysimwire.ShipmentShipped
	ShipmentOutOfStock = paysimwire.ShipmentOutOfStock
	RefundSucceeded    = paysimwire.RefundSucceeded
	RefundFailed       = paysimwire.RefundFailed
)

// Snapshot is the whole ledger, as GET /admin/ledger returns it. Each list
// is in creation order and never nil.
type Snapshot struct {
	Intents   []Intent   `json:"intents"`
	Charges   []Charge   `json:"charges"`
	Refunds   []Refund   `json:"refunds"`
	Shipments []Shipment `json:"shipments"`
}

// Counts are the ledger's totals, the durable part of Stats.
type Counts struct {
	// CapturesByOrder counts captures (charges not failed) per order id.
	CapturesByOrder map[string]int `json:"captures_by_order"`
	// MaxCapturesPerOrder is the largest value in CapturesByOrder, 0 if
	// none: above 1 means an order was charged twice.
	MaxCapturesPerOrder int `json:"max_captures_per_order"`
	// ShipmentsByOrder counts shipments made per order id.
	ShipmentsByOrder map[string]int `json:"shipments_by_order"`
	// MaxShipmentsPerOrder is the largest value in ShipmentsByOrder.
	MaxShipmentsPerOrder int `json:"max_shipments_per_order"`
	// Charges counts captures; Declines counts remembered declines.
	Charges  int `json:"charges"`
	Declines int `json:"declines"`
	// Refunds counts refunds.
	Refunds int `json:"refunds"`
	// Shipments counts shipments made; OutOfStock counts remembered
	// out-of-stock failures.
	Shipments  int `json:"shipments"`
	OutOfStock int `json:"out_of_stock"`
}

// Stats is GET /admin/stats: the ledger's Counts, plus this process's
// request count and injected faults by kind.
type Stats struct {
	Counts
	// Requests counts requests to /v1/ since the process started.
	Requests int64 `json:"requests"`
	// FaultsInjected counts injected faults by kind (every kind present)
	// since the process started.
	FaultsInjected map[FaultKind]int64 `json:"faults_injected"`
	// DelaysAbandoned counts injected delays (latency, timeout) that ended
	// because the client went away: nothing was done for those requests.
	// A harness that kills its client mid-call waits on it, instead of on
	// the clock, to know paysim is done with the request.
	DelaysAbandoned int64 `json:"delays_abandoned"`
	// Webhooks counts webhook events and deliveries since the process
	// started.
	Webhooks WebhookStats `json:"webhooks"`
}
