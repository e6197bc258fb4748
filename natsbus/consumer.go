package natsbus

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderly/orderly/admission"
	"github.com/orderly/orderly/api"
	"github.com/orderly/orderly/apperr"
	"github.com/orderly/orderly/intake"
	"github.com/orderly/orderly/service"
)

// Header names and subjects of the command bus.
const (
	// OrderIDHeader names the order a command acts on.
	OrderIDHeader = "Orderly-Order-Id"
	// ReasonHeader carries why a command was dead-lettered.
	ReasonHeader = "Orderly-Reason"
	// SubjectHeader carries a dead-lettered command's original subject.
	SubjectHeader = "Orderly-Command-Subject"
	// SequenceHeader carries a dead-lettered command's stream sequence.
	SequenceHeader = "Orderly-Command-Sequence"
	// DefaultRoot is the first token of every subject.
	DefaultRoot = "orderly"
)

// OpRefund is the bus operation of a partial refund (issue 16): the
// command's body is POST /v1/orders/{id}/refunds's ({"amount","currency",
// "reason"}), run by service.Refund under the command's Nats-Msg-Id, so a
// command and its HTTP twin are one refund.
const OpRefund intake.Op = "refund"

// validOp reports whether op is a bus operation: a transition (pay,
// fulfill, cancel) or a partial refund.
func validOp(op intake.Op) bool { return op.Valid() || op == OpRefund }

// CommandSubject is the subject of tenant's op commands under root.
func CommandSubject(root, tenant, op string) string { return root + "." + tenant + ".commands." + op }

// DeadLetterSubject is where a rejected command of tenant's op goes.
func DeadLetterSubject(root, tenant, op string) string {
	return root + "." + tenant + ".commands.dead." + op
}

// Config configures a Consumer.
type Config struct {
	// Root is the first token of the subjects (default DefaultRoot; tests
	// use their own).
	Root string
	// Stream is the JetStream stream that holds the command subjects (and
	// the dead-letter subjects); EnsureStream creates it.
	Stream string
	// Durable is the durable consumer's name; instances sharing it share
	// the work, each message going to one of them.
	Durable string
	// APIKeys maps each API key to its tenant, as the HTTP API's
	// (api.Config.APIKeys): a command of a tenant must be signed with one
	// of its keys (SignatureHeader). A tenant with no key sends no
	// command.
	APIKeys map[string]string
	// SignatureTolerance is DefaultSignatureTolerance when zero.
	SignatureTolerance time.Duration
	// Decoder decodes, validates and fingerprints a command's body as the
	// HTTP API does its request (the same Fingerprinter, or keys shared
	// between HTTP and commands would not match).
	Decoder intake.Decoder
	// Gate is the admission gate the HTTP API uses (api.Config.Gate):
	// commands count against the tenant's rate and in-flight slots and the
	// server's. Nil: no bound.
	Gate *admission.Gate
	// RequestTimeout is each command's deadline from its admission, as the
	// HTTP request's (0: none).
	RequestTimeout time.Duration
	// AckWait is how long JetStream waits for an acknowledgement before it
	// redelivers (default 60s; it must exceed a provider call's lease).
	AckWait time.Duration
	// Logger receives one line per command (default slog.Default()).
	Logger *slog.Logger
}

// Consumer runs commands from JetStream.
type Consumer struct {
	js   jetstream.JetStream
	svc  *service.Service
	cfg  Config
	keys map[string][][]byte // tenant → its API keys
	wg   sync.WaitGroup      // commands running (Run)
}

// New returns a Consumer running commands on svc.
func New(js jetstream.JetStream, svc *service.Service, cfg Config) *Consumer {
	if cfg.AckWait <= 0 {
		cfg.AckWait = 60 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Root == "" {
		cfg.Root = DefaultRoot
	}
	if cfg.SignatureTolerance <= 0 {
		cfg.SignatureTolerance = DefaultSignatureTolerance
	}
	if cfg.Gate == nil {
		cfg.Gate = admission.New(admission.Config{})
	}
	c := &Consumer{js: js, svc: svc, cfg: cfg, keys: map[string][][]byte{}}
	for k, tenant := range cfg.APIKeys {
		c.keys[tenant] = append(c.keys[tenant], []byte(k))
	}
	return c
}

// DefaultDuplicateWindow is the commands stream's duplicate window when
// none is given: a command published again with the same Nats-Msg-Id within
// it is dropped by the stream, a later one is replayed by the idempotency
// ledger.
const DefaultDuplicateWindow = 2 * time.Minute

// EnsureStream creates (or updates) the stream name of the commands and
// dead letters under root, with a duplicate window of dupWindow (default
// DefaultDuplicateWindow).
func EnsureStream(ctx context.Context, js jetstream.JetStream, name, root string, dupWindow time.Duration) error {
	if dupWindow <= 0 {
		dupWindow = DefaultDuplicateWindow
	}
	_, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name: name, Subjects: []string{CommandSubject(root, "*", "*"), DeadLetterSubject(root, "*", "*")},
		Storage: jetstream.FileStorage, Duplicates: dupWindow,
	})
	return err
}

// Run consumes until ctx is done, then waits for the commands it started.
// Commands run concurrently, each in the slots of its tenant (Config.Gate):
// one tenant's slow commands hold only that tenant's slots, and a command
// past its tenant's bound is Nak'd with a delay while others go on.
func (c *Consumer) Run(ctx context.Context) error {
	cons, err := c.js.CreateOrUpdateConsumer(ctx, c.cfg.Stream, jetstream.ConsumerConfig{
		Durable: c.cfg.Durable, FilterSubject: CommandSubject(c.cfg.Root, "*", "*"),
		AckPolicy: jetstream.AckExplicitPolicy, AckWait: c.cfg.AckWait, MaxDeliver: -1,
	})
	if err != nil {
		return fmt.Errorf("natsbus: consumer %s on %s: %w", c.cfg.Durable, c.cfg.Stream, err)
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		if run := c.admit(ctx, m); run != nil {
			c.wg.Go(run)
		}
	})
	if err != nil {
		return err
	}
	<-ctx.Done()
	cc.Drain()
	<-cc.Closed()
	c.wg.Wait()
	return nil
}

// Handle runs one command message to its end and acknowledges it as the
// package documentation says.
func (c *Consumer) Handle(ctx context.Context, m jetstream.Msg) {
	if run := c.admit(ctx, m); run != nil {
		run()
	}
}

// admit parses and authenticates m, then takes its tenant's rate and
// in-flight slots. It returns the run of the command, which holds the
// slots until it has acknowledged m; or nil when m is already answered:
// dead-lettered (malformed, unauthenticated) or Nak'd for later (a bound).
func (c *Consumer) admit(ctx context.Context, m jetstream.Msg) func() {
	cmd, err := c.parse(m)
	if err != nil {
		c.deadLetter(m, cmd, err)
		return nil
	}
	log := c.cfg.Logger.With("subject", m.Subject(), "order_id", cmd.orderID)
	if _, err := c.cfg.Gate.Allow(cmd.tenant); err != nil {
		c.retryLater(m, log, err)
		return nil
	}
	release, err := c.cfg.Gate.Enter(cmd.tenant)
	if err != nil {
		c.retryLater(m, log, err)
		return nil
	}
	return func() {
		defer release()
		c.run(ctx, m, cmd, log)
	}
}

// run decodes and runs cmd, then acknowledges m.
func (c *Consumer) run(ctx context.Context, m jetstream.Msg, cmd command, log *slog.Logger) {
	if c.cfg.RequestTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.cfg.RequestTimeout)
		defer cancel()
	}
	err := c.apply(ctx, cmd, m.Data())
	if err == nil {
		if err := m.DoubleAck(ctx); err != nil {
			log.Warn("command ack failed; it will be redelivered and replayed", "err", err)
		}
		log.Info("command applied")
		return
	}
	p, ra := api.ProblemFor(err)
	if retryable(p, ra) {
		c.retryLater(m, log, err)
		return
	}
	if !errors.As(err, new(*apperr.Error)) {
		log.Error("command failed", "err", err)
	}
	c.deadLetter(m, cmd, err)
}

// apply decodes cmd's body as the HTTP request it stands for and runs it
// under the command's key.
func (c *Consumer) apply(ctx context.Context, cmd command, body []byte) error {
	if cmd.op == OpRefund {
		call, in, err := c.cfg.Decoder.Refund(cmd.tenant, cmd.orderID, []string{cmd.key}, body)
		if err == nil {
			_, err = c.svc.Refund(ctx, call, in)
		}
		return err
	}
	t, err := c.cfg.Decoder.Transition(cmd.tenant, cmd.op, cmd.orderID, []string{cmd.key}, body, 0)
	if err == nil {
		_, err = t.Run(ctx, c.svc)
	}
	return err
}

// retryLater Naks m with the Retry-After of err's problem (at least 1s).
func (c *Consumer) retryLater(m jetstream.Msg, log *slog.Logger, err error) {
	p, ra := api.ProblemFor(err)
	delay := max(ra, time.Second)
	_ = m.NakWithDelay(delay)
	log.Info("command retried later", "reason", p.Code(), "delay", delay.String())
}

// retryable reports whether a command's outcome asks for a retry: the key or
// order busy, overload, a bound, unavailability (every answer with
// Retry-After), an internal error.
func retryable(p api.Problem, retryAfter time.Duration) bool {
	return p.Status >= 500 || p.Status == http.StatusTooManyRequests || retryAfter > 0
}

// command is what a message's subject and headers say.
type command struct {
	tenant, orderID, key string
	op                   intake.Op
}

// parse reads a command from m and authenticates it, or says why it cannot
// be run (an *apperr.Error whose code is the dead letter's reason).
func (c *Consumer) parse(m jetstream.Msg) (command, error) {
	parts := strings.Split(m.Subject(), ".")
	if len(parts) != 4 || parts[0] != c.cfg.Root || parts[2] != "commands" {
		return command{}, apperr.Errorf("bad_subject", "want %s.<tenant>.commands.<op>", c.cfg.Root)
	}
	cmd := command{tenant: parts[1], op: intake.Op(parts[3]),
		orderID: m.Headers().Get(OrderIDHeader), key: m.Headers().Get(nats.MsgIdHdr)}
	keys := c.keys[cmd.tenant]
	switch {
	case len(keys) == 0:
		return cmd, apperr.Errorf("unknown_tenant", "no tenant %q has an API key", cmd.tenant)
	case !validOp(cmd.op):
		return cmd, apperr.Errorf("unknown_operation", "want pay, fulfill, cancel or refund")
	case cmd.orderID == "" || strings.ContainsAny(cmd.orderID, "/?#%"):
		return cmd, apperr.Errorf("missing_order_id", "the %s header is required", OrderIDHeader)
	case cmd.key == "":
		return cmd, apperr.Errorf("missing_idempotency_key", "the %s header is required", nats.MsgIdHdr)
	}
	stored := time.Now()
	if md, err := m.Metadata(); err == nil {
		stored = md.Timestamp
	}
	if err := verify(m.Headers().Get(SignatureHeader), keys, m.Subject(), cmd.key, cmd.orderID, m.Data(),
		stored, c.cfg.SignatureTolerance); err != nil {
		return cmd, apperr.Errorf("unauthorized", "%s", strings.TrimPrefix(err.Error(), ErrSignature.Error()+": "))
	}
	return cmd, nil
}

// deadLetterID is the Nats-Msg-Id of m's dead letter: its stream and
// stream sequence, so a redelivery of one stored command is dead-lettered
// once within the duplicate window, and two stored copies are two. A
// message without metadata (not from a stream) gets a random id.
func (c *Consumer) deadLetterID(m jetstream.Msg) (string, uint64) {
	md, err := m.Metadata()
	if err != nil || md == nil {
		return "dead:" + uuid.NewString(), 0
	}
	return "dead:" + md.Stream + ":" + strconv.FormatUint(md.Sequence.Stream, 10), md.Sequence.Stream
}

// deadLetter publishes m with err's reason and problem to its dead-letter
// subject, then terminates it; if publishing fails it Naks, so nothing is
// lost.
//
// A dead letter's id (deadLetterID) can be guessed, and anyone allowed to
// publish to the dead-letter subjects could publish one ahead. So a
// publish that JetStream answers as a duplicate is checked: the stored
// message must be this dead letter (same subject, reason, command and
// body); if it is not, the forgery is logged and the dead letter is
// published again under a fresh id, and only then is the command
// terminated. The command's only answer is never a forged one.
func (c *Consumer) deadLetter(m jetstream.Msg, cmd command, err error) {
	p, _ := api.ProblemFor(err)
	var oe *apperr.Error
	if errors.As(err, &oe) && p.Code() != string(oe.Code) {
		// A refusal of the bus itself (unknown_tenant, bad_subject, …),
		// which the HTTP API has no row for.
		p = api.Problem{Type: api.ProblemBaseURI + string(oe.Code), Title: "Command refused",
			Status: http.StatusBadRequest, Detail: oe.Message}
	}
	reason := p.Code()
	tenant, op := cmd.tenant, string(cmd.op)
	if !admission.ValidTenant(tenant) {
		tenant = "_invalid"
	}
	if !validOp(intake.Op(op)) && !admission.ValidTenant(op) {
		op = "_invalid"
	}
	body, _ := json.Marshal(p)
	out := nats.NewMsg(DeadLetterSubject(c.cfg.Root, tenant, op))
	out.Data = body
	out.Header.Set(ReasonHeader, reason)
	out.Header.Set(SubjectHeader, m.Subject())
	out.Header.Set(OrderIDHeader, cmd.orderID)
	id, seq := c.deadLetterID(m)
	if seq > 0 {
		out.Header.Set(SequenceHeader, strconv.FormatUint(seq, 10))
	}
	out.Header.Set(nats.MsgIdHdr, id)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.publishDeadLetter(ctx, out); err != nil {
		c.cfg.Logger.Warn("dead-letter publish failed; the command will be redelivered", "err", err)
		_ = m.NakWithDelay(time.Second)
		return
	}
	// A plain Term: servers before 2.10.4 ignore "+TERM <reason>" (the
	// message stays pending and is redelivered, and dead-lettered again,
	// every AckWait). The reason travels in the dead letter's header.
	if err := m.Term(); err != nil && !errors.Is(err, nats.ErrMsgAlreadyAckd) {
		c.cfg.Logger.Warn("term failed", "err", err)
	}
	c.cfg.Logger.Info("command dead-lettered", "subject", m.Subject(), "reason", reason)
}

// publishDeadLetter publishes out and makes sure the stream holds it: a
// publish answered as a duplicate is accepted only when the stored
// message is out's twin (an earlier dead letter of the same command);
// otherwise out is published again under a fresh id.
func (c *Consumer) publishDeadLetter(ctx context.Context, out *nats.Msg) error {
	var opts []jetstream.PublishOpt
	if c.cfg.Stream != "" {
		opts = append(opts, jetstream.WithExpectStream(c.cfg.Stream))
	}
	ack, err := c.js.PublishMsg(ctx, out, opts...)
	if err != nil || !ack.Duplicate {
		return err
	}
	if twin, err := c.sameDeadLetter(ctx, ack, out); err != nil || twin {
		return err
	}
	c.cfg.Logger.Warn("a message with this command's dead-letter id is not its dead letter (forged?); publishing it under a fresh id",
		"msg_id", out.Header.Get(nats.MsgIdHdr), "stored_seq", ack.Sequence)
	out.Header.Set(nats.MsgIdHdr, out.Header.Get(nats.MsgIdHdr)+":"+uuid.NewString())
	ack, err = c.js.PublishMsg(ctx, out, opts...)
	if err == nil && ack.Duplicate {
		err = errors.New("natsbus: a fresh dead-letter id was a duplicate")
	}
	return err
}

// sameDeadLetter reports whether the message ack names (the one the stream
// kept under out's id) is out's twin: same subject, body and dead-letter
// headers.
func (c *Consumer) sameDeadLetter(ctx context.Context, ack *jetstream.PubAck, out *nats.Msg) (bool, error) {
	s, err := c.js.Stream(ctx, ack.Stream)
	if err != nil {
		return false, err
	}
	stored, err := s.GetMsg(ctx, ack.Sequence)
	if err != nil {
		return false, err
	}
	if stored.Subject != out.Subject || !bytes.Equal(stored.Data, out.Data) {
		return false, nil
	}
	for _, h := range []string{ReasonHeader, SubjectHeader, OrderIDHeader, SequenceHeader} {
		if stored.Header.Get(h) != out.Header.Get(h) {
			return false, nil
		}
	}
	return true, nil
}
