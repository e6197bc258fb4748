package natsbus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderly/orderly/api"
)

// Header names and subjects of the command bus.
const (
	// OrderIDHeader names the order a command acts on.
	OrderIDHeader = "Orderly-Order-Id"
	// ReasonHeader carries why a command was dead-lettered.
	ReasonHeader = "Orderly-Reason"
	// SubjectHeader carries a dead-lettered command's original subject.
	SubjectHeader = "Orderly-Command-Subject"
	// DefaultRoot is the first token of every subject.
	DefaultRoot = "orderly"
)

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
	// Tenants are the tenants that may send commands.
	Tenants map[string]bool
	// AckWait is how long JetStream waits for an acknowledgement before it
	// redelivers (default 60s; it must exceed a provider call's lease).
	AckWait time.Duration
	// Logger receives one line per command (default slog.Default()).
	Logger *slog.Logger
}

// Consumer runs commands from JetStream.
type Consumer struct {
	js   jetstream.JetStream
	cmds *api.Commands
	cfg  Config
}

// New returns a Consumer running commands through cmds.
func New(js jetstream.JetStream, cmds *api.Commands, cfg Config) *Consumer {
	if cfg.AckWait <= 0 {
		cfg.AckWait = 60 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Root == "" {
		cfg.Root = DefaultRoot
	}
	return &Consumer{js: js, cmds: cmds, cfg: cfg}
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

// Run consumes until ctx is done.
func (c *Consumer) Run(ctx context.Context) error {
	cons, err := c.js.CreateOrUpdateConsumer(ctx, c.cfg.Stream, jetstream.ConsumerConfig{
		Durable: c.cfg.Durable, FilterSubject: CommandSubject(c.cfg.Root, "*", "*"),
		AckPolicy: jetstream.AckExplicitPolicy, AckWait: c.cfg.AckWait, MaxDeliver: -1,
	})
	if err != nil {
		return fmt.Errorf("natsbus: consumer %s on %s: %w", c.cfg.Durable, c.cfg.Stream, err)
	}
	cc, err := cons.Consume(func(m jetstream.Msg) { c.Handle(ctx, m) })
	if err != nil {
		return err
	}
	<-ctx.Done()
	cc.Drain()
	<-cc.Closed()
	return nil
}

// Handle runs one command message and acknowledges it as the package
// documentation says.
func (c *Consumer) Handle(ctx context.Context, m jetstream.Msg) {
	cmd, reason := c.parse(m)
	if reason != "" {
		c.deadLetter(m, cmd, reason, nil)
		return
	}
	res := c.cmds.Run(ctx, cmd)
	log := c.cfg.Logger.With("subject", m.Subject(), "order_id", cmd.OrderID, "status", res.Status)
	switch {
	case res.Status < 300:
		if err := m.DoubleAck(ctx); err != nil {
			log.Warn("command ack failed; it will be redelivered and replayed", "err", err)
		}
		log.Info("command applied")
	case retryable(res):
		delay := time.Duration(max(res.RetryAfter, 1)) * time.Second
		_ = m.NakWithDelay(delay)
		log.Info("command retried later", "delay", delay.String())
	default:
		c.deadLetter(m, cmd, problemCode(res), res.Problem)
	}
}

// retryable reports whether a command's outcome asks for a retry: the key or
// order busy, overload, unavailability (every answer with Retry-After).
func retryable(r api.CommandResult) bool {
	return r.Status >= 500 || r.Status == http.StatusTooManyRequests || r.RetryAfter > 0
}

func problemCode(r api.CommandResult) string {
	if r.Problem != nil {
		return strings.TrimPrefix(r.Problem.Type, api.ProblemBaseURI)
	}
	return http.StatusText(r.Status)
}

// parse reads a command from m, or says why it cannot be run.
func (c *Consumer) parse(m jetstream.Msg) (api.Command, string) {
	parts := strings.Split(m.Subject(), ".")
	if len(parts) != 4 || parts[0] != c.cfg.Root || parts[2] != "commands" {
		return api.Command{}, "bad_subject: want " + c.cfg.Root + ".<tenant>.commands.<op>"
	}
	cmd := api.Command{TenantID: parts[1], Op: parts[3], Body: m.Data(),
		OrderID: m.Headers().Get(OrderIDHeader), Key: m.Headers().Get(nats.MsgIdHdr)}
	switch {
	case !c.cfg.Tenants[cmd.TenantID]:
		return cmd, "unknown_tenant"
	case cmd.Op != "pay" && cmd.Op != "fulfill" && cmd.Op != "cancel":
		return cmd, "unknown_operation"
	case cmd.OrderID == "" || strings.ContainsAny(cmd.OrderID, "/?#%"):
		return cmd, "missing_order_id: the " + OrderIDHeader + " header is required"
	case cmd.Key == "":
		return cmd, "missing_idempotency_key: the " + nats.MsgIdHdr + " header is required"
	}
	return cmd, ""
}

// deadLetter publishes m with reason to its dead-letter subject, then
// terminates it; if publishing fails it Naks, so nothing is lost.
func (c *Consumer) deadLetter(m jetstream.Msg, cmd api.Command, reason string, p *api.Problem) {
	tenant, op := cmd.TenantID, cmd.Op
	if tenant == "" || strings.ContainsAny(tenant, ".*> ") {
		tenant = "_invalid"
	}
	if op == "" || strings.ContainsAny(op, ".*> ") {
		op = "_invalid"
	}
	body, _ := json.Marshal(p)
	out := nats.NewMsg(DeadLetterSubject(c.cfg.Root, tenant, op))
	out.Data = body
	out.Header.Set(ReasonHeader, reason)
	out.Header.Set(SubjectHeader, m.Subject())
	out.Header.Set(OrderIDHeader, cmd.OrderID)
	if cmd.Key != "" {
		out.Header.Set(nats.MsgIdHdr, cmd.Key+"/dead")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.js.PublishMsg(ctx, out); err != nil {
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
