package book

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/orderly/orderly/client"
	"github.com/orderly/orderly/idempotency"
	"github.com/orderly/orderly/order"
)

// Operation kinds; KindReplay labels latencies of sequence replays.
const (
	KindCreate  = "create"
	KindPay     = "pay"
	KindFulfill = "fulfill"
	KindCancel  = "cancel"
	// KindRefund is a partial refund (POST /v1/orders/{id}/refunds; on the
	// bus, the command op "refund").
	KindRefund = "refund"
	KindReplay = "replay"
)

// Ways a request is sent besides the primary send of a logical operation:
// the duplicate patterns.
const (
	// ViaPrimary is the first send of a logical operation.
	ViaPrimary = "primary"
	// ViaDoubleClick is the second of two sends of the same body without a
	// key, a few milliseconds apart: the server derives one key for both.
	ViaDoubleClick = "double_click"
	// ViaParallel is a copy of an operation with the same key sent to
	// another instance at the same moment.
	ViaParallel = "parallel_instances"
	// ViaSequenceReplay re-sends a finished operation with its key.
	ViaSequenceReplay = "sequence_replay"
	// ViaReconcile re-sends an operation left without a definitive answer,
	// with its key, after the storm.
	ViaReconcile = "reconcile"
	// ViaBus reads a bus command's outcome back: once the command's key is
	// completed, the same operation is sent over HTTP with its key, and
	// must be answered as a replay (the command took effect, once).
	ViaBus = "bus_readback"
	// ViaBusTwin is the same operation sent over HTTP with the bus
	// command's key while the command is on the bus: the two race, and
	// one of them takes effect.
	ViaBusTwin = "bus_http_twin"
)

// Obs is one call as the harness saw it: the client's whole call, retries
// included, or one raw send (with its own retries) for keyless requests.
type Obs struct {
	Via        string `json:"via"`
	Instance   int    `json:"instance"`
	Status     int    `json:"status"`
	Code       string `json:"code,omitempty"`
	Replayed   bool   `json:"replayed"`
	ResourceID string `json:"resource_id,omitempty"`
	State      string `json:"state,omitempty"`
	Version    int64  `json:"version,omitempty"`
	// BodyHash is the hex SHA-256 of the answer's body (empty if none was
	// read to its end): answers for one key that stand for the same
	// stored outcome and order version must be byte-identical.
	BodyHash string `json:"body_sha256,omitempty"`
	// Token is the answer's Orderly-Consistency-Token (set with read
	// replicas): a GET with it sees at least this answer's write.
	Token      string        `json:"-"`
	Definitive bool          `json:"definitive"`
	Err        string        `json:"err,omitempty"`
	Attempts   int           `json:"attempts"`
	Latency    time.Duration `json:"-"`
	At         time.Time     `json:"-"`
}

// Outcome is what two answers for one key must agree on: the status and the
// resource of a success, the status and the problem code of an error.
func (o Obs) Outcome() string {
	if o.Status >= 200 && o.Status < 300 {
		return fmt.Sprintf("%d %s", o.Status, o.ResourceID)
	}
	return fmt.Sprintf("%d %s", o.Status, o.Code)
}

// Stored reports whether the service stores this outcome under the key (and
// so must replay it): a success or a final error; not a 400 (input rejected)
// or a 404.
func (o Obs) Stored() bool {
	return o.Definitive && o.Status != http.StatusBadRequest && o.Status != http.StatusNotFound && o.Status != 0
}

// Op is one logical operation (or a user's repeat of one with a new key):
// one key, one body, one or more calls.
type Op struct {
	Seq     int
	Order   *OrderRec
	Kind    string
	Keyed   bool   // false: sent without an Idempotency-Key; the server derives one
	Key     string // the key sent, or the key the server derives
	KeyHash string // SHA-256 of Key, as idempotency_keys stores it
	// AltKeyHashes are other hashes the server may derive for a keyless
	// request: a bodiless request may be fingerprinted as if its body were
	// {}.
	AltKeyHashes []string
	Path         string
	Body         []byte // nil: no body
	// AltBody is the same request spelled differently (members reordered,
	// other whitespace, a volatile member added): what a second click of
	// another client library may send. Keyless double clicks send it.
	AltBody []byte
	Create  *order.NewOrderInput
	Pay     *client.PayInput
	Refund  *client.RefundInput
	Repeat  bool  // a repeat with a new key by the user, not a logical op
	Race    bool  // sent racing another operation on the same order
	Bus     bool  // sent as a JetStream command (Nats-Msg-Id = Key)
	Allowed []int // definitive statuses that are legal answers

	mu  sync.Mutex
	obs []Obs
}

// Record adds a call to op; a 201 to a create gives the order its id.
func (op *Op) Record(o Obs) {
	op.mu.Lock()
	op.obs = append(op.obs, o)
	op.mu.Unlock()
	if op.Kind == KindCreate && o.Definitive && o.Status == http.StatusCreated && o.ResourceID != "" {
		op.Order.setID(o.ResourceID)
	}
}

// Observations returns a copy of the calls made so far.
func (op *Op) Observations() []Obs {
	op.mu.Lock()
	defer op.mu.Unlock()
	return slices.Clone(op.obs)
}

// Definitive returns the first definitive answer, if any.
func (op *Op) Definitive() (Obs, bool) {
	op.mu.Lock()
	defer op.mu.Unlock()
	for _, o := range op.obs {
		if o.Definitive {
			return o, true
		}
	}
	return Obs{}, false
}

// OrderRec is one logical create and what followed it.
type OrderRec struct {
	Seq    int
	Marker string // the order's customer_id, unique to this logical create
	Input  order.NewOrderInput
	Amount int64

	mu  sync.Mutex
	id  string
	ops []*Op
}

func (o *OrderRec) setID(id string) {
	o.mu.Lock()
	if o.id == "" {
		o.id = id
	}
	o.mu.Unlock()
}

// ID is the order id of the first 201 seen ("" if none yet).
func (o *OrderRec) ID() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.id
}

// Ops returns the order's operations in the order they were made.
func (o *OrderRec) Ops() []*Op {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.ops)
}

// Book holds every order and operation of a run.
type Book struct {
	RunID  string
	Tenant string

	mu     sync.Mutex
	orders []*OrderRec
	opSeq  int
}

// NewBook returns an empty book for run id and tenant.
func NewBook(runID, tenant string) *Book { return &Book{RunID: runID, Tenant: tenant} }

// MarkerPrefix starts the customer_id of every order of the run.
func (b *Book) MarkerPrefix() string { return "storm-" + b.RunID + "-" }

// NewOrder records a logical create with sequence number seq.
func (b *Book) NewOrder(seq int, in order.NewOrderInput) *OrderRec {
	var amount int64
	for _, it := range in.Items {
		amount += it.Quantity * it.UnitPrice
	}
	o := &OrderRec{Seq: seq, Marker: in.CustomerID, Input: in, Amount: amount}
	b.mu.Lock()
	b.orders = append(b.orders, o)
	b.mu.Unlock()
	return o
}

// Orders returns every order recorded.
func (b *Book) Orders() []*OrderRec {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.orders)
}

// AllOps returns every operation recorded.
func (b *Book) AllOps() []*Op {
	var out []*Op
	for _, o := range b.Orders() {
		out = append(out, o.Ops()...)
	}
	return out
}

// OpSpec describes an operation to record with NewOp.
type OpSpec struct {
	Kind    string
	Keyed   bool                 // sent with a key of the run's; false: the server derives one
	Create  *order.NewOrderInput // the body of a create
	Pay     *client.PayInput     // the body of a pay
	Refund  *client.RefundInput  // the body of a partial refund
	Repeat  bool                 // a repeat with a new key by the user, not a logical operation
	Race    bool                 // sent racing another operation on the same order
	Allowed []int                // definitive statuses that are legal answers
}

// NewOp records an operation on o. Keyed operations get a key unique to the
// run; keyless ones get the key the server derives from the fingerprint.
func (b *Book) NewOp(o *OrderRec, s OpSpec) (*Op, error) {
	b.mu.Lock()
	b.opSeq++
	seq := b.opSeq
	b.mu.Unlock()
	op := &Op{Seq: seq, Order: o, Kind: s.Kind, Keyed: s.Keyed, Create: s.Create, Pay: s.Pay, Refund: s.Refund,
		Repeat: s.Repeat, Race: s.Race, Allowed: s.Allowed}
	id := o.ID()
	route, params := "/v1/orders", map[string]string(nil)
	switch s.Kind {
	case KindCreate:
		op.Path = "/v1/orders"
	default:
		if id == "" {
			return nil, fmt.Errorf("%s before the order has an id", s.Kind)
		}
		segment := s.Kind
		if s.Kind == KindRefund {
			segment = "refunds"
		}
		op.Path = "/v1/orders/" + id + "/" + segment
		route, params = "/v1/orders/{id}/"+segment, map[string]string{"id": id}
	}
	switch {
	case s.Create != nil:
		op.Body, _ = json.Marshal(s.Create)
	case s.Pay != nil:
		op.Body, _ = json.Marshal(s.Pay)
	case s.Refund != nil:
		op.Body, _ = json.Marshal(s.Refund)
	}
	if !s.Keyed {
		op.AltBody = respell(op.Body, seq)
	}
	derive := func(body []byte) (string, error) {
		fp, err := idempotency.Fingerprinter{}.Fingerprint(idempotency.Request{
			Method: http.MethodPost, Route: route, PathParams: params, Body: body})
		return idempotency.DerivedKey(fp), err
	}
	if s.Keyed {
		op.Key = fmt.Sprintf("storm-%s-%d-%s-%d", b.RunID, o.Seq, s.Kind, seq)
	} else {
		var err error
		if op.Key, err = derive(op.Body); err != nil {
			return nil, err
		}
		if op.Body == nil {
			alt, _ := derive([]byte("{}"))
			op.AltKeyHashes = append(op.AltKeyHashes, idempotency.HashKey(alt))
		}
	}
	op.KeyHash = idempotency.HashKey(op.Key)
	o.mu.Lock()
	o.ops = append(o.ops, op)
	o.mu.Unlock()
	return op, nil
}

// respell returns body with its top-level members in reverse order, spaces
// around separators and a volatile request_id member, or {} plus request_id
// for no body. The server must take it for the same request.
func respell(body []byte, seq int) []byte {
	var m map[string]json.RawMessage
	if len(body) > 0 && json.Unmarshal(body, &m) != nil {
		return body
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	slices.Reverse(keys)
	var b strings.Builder
	fmt.Fprintf(&b, "{ \"request_id\" : \"rq-%d\"", seq)
	for _, k := range keys {
		kb, _ := json.Marshal(k)
		fmt.Fprintf(&b, " ,\n  %s : %s", kb, m[k])
	}
	b.WriteString(" }")
	return []byte(b.String())
}
