package eventpub_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderly/orderly/event"
	"github.com/orderly/orderly/eventpub"
	"github.com/orderly/orderly/idempotency"
	"github.com/orderly/orderly/internal/testenv"
	"github.com/orderly/orderly/natsbus"
	"github.com/orderly/orderly/order"
	"github.com/orderly/orderly/paysim/testmode"
	"github.com/orderly/orderly/service"
	"github.com/orderly/orderly/store"
)

// TestPublishesEveryEventOnce publishes a few orders' events to a stream
// of the test's own, then publishes them all again from the start (a
// crash before the cursor moved): the stream drops the duplicates by
// Nats-Msg-Id, and holds each event once, in each order's sequence.
func TestPublishesEveryEventOnce(t *testing.T) {
	js := testenv.JetStream(t)
	for _, kind := range testenv.Kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			tenant := "nats" + strings.ReplaceAll(uuid.NewString(), "-", "")[:12]
			name := "ORDERLY_TEST_" + strings.ToUpper(tenant)
			ctx := context.Background()
			stream, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{"orderly." + tenant + ".>"},
				Duplicates: 10 * time.Minute, Storage: jetstream.MemoryStorage})
			if err != nil {
				t.Fatalf("CreateStream: %v", err)
			}
			t.Cleanup(func() { _ = js.DeleteStream(context.Background(), name) })

			env := testenv.New(t, kind, testenv.Options{})
			want := 0
			for i := range 3 {
				res, err := env.Service.Create(ctx, tenant, idempotency.Key{}, order.NewOrderInput{CustomerID: fmt.Sprint("c", i),
					Currency: "EUR", Items: []order.Item{{SKU: "s", Quantity: 1, UnitPrice: 100}}})
				if err != nil {
					t.Fatal(err)
				}
				_, err = env.Service.Pay(ctx, service.Call{TenantID: tenant, OrderID: res.Order.ID,
					Key: idempotency.Key{Value: "p" + res.Order.ID, Fingerprint: "p"}},
					service.PayInput{Amount: 100, Currency: "EUR", PaymentMethod: testmode.MethodApproved})
				if err != nil {
					t.Fatal(err)
				}
				want += 2
			}
			es := env.Store.(store.EventStore)
			p := &eventpub.Publisher{Store: es, JS: js, Holder: "test", Batch: 4}
			publishAll := func() int {
				total := 0
				deadline := time.Now().Add(30 * time.Second)
				for total < want && time.Now().Before(deadline) {
					n, err := p.RunOnce(ctx)
					if err != nil {
						t.Fatalf("RunOnce: %v", err)
					}
					total += n
					if n == 0 {
						time.Sleep(20 * time.Millisecond) // the feed shows an event once older transactions end
					}
				}
				return total
			}
			if n := publishAll(); n != want {
				t.Fatalf("published %d, want %d", n, want)
			}
			if n, err := p.RunOnce(ctx); err != nil || n != 0 {
				t.Fatalf("a pass with nothing new published %d (%v)", n, err)
			}
			// Forget the progress, as a crash before AdvanceCursor would.
			if err := es.AdvanceCursor(ctx, eventpub.CursorName, "test", ""); err != nil {
				t.Fatal(err)
			}
			if n := publishAll(); n != want {
				t.Fatalf("republished %d, want %d", n, want)
			}
			info, err := stream.Info(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if int(info.State.Msgs) != want {
				t.Fatalf("stream holds %d messages, want %d (one per event)", info.State.Msgs, want)
			}
			last := map[string]int64{}
			for seq := uint64(1); seq <= info.State.LastSeq; seq++ {
				m, err := stream.GetMsg(ctx, seq)
				if err != nil {
					t.Fatalf("GetMsg(%d): %v", seq, err)
				}
				var ev event.Event
				if err := json.Unmarshal(m.Data, &ev); err != nil {
					t.Fatal(err)
				}
				if m.Header.Get(jetstream.MsgIDHeader) != ev.ID || m.Subject != eventpub.Subject(tenant, ev.Type) {
					t.Fatalf("message %d: subject %s, Nats-Msg-Id %s, event %+v", seq, m.Subject, m.Header.Get(jetstream.MsgIDHeader), ev)
				}
				if ev.Sequence != last[ev.OrderID]+1 {
					t.Fatalf("order %s: sequence %d after %d", ev.OrderID, ev.Sequence, last[ev.OrderID])
				}
				last[ev.OrderID] = ev.Sequence
			}
		})
	}
}

// TestStreamSubjectsDoNotOverlapCommands: a stream over StreamSubjects and
// the commands stream (natsbus.EnsureStream) can live on one NATS server:
// JetStream refuses streams whose subjects overlap, as the README's former
// suggestion 'orderly.>' did, and orderd then failed to start.
func TestStreamSubjectsDoNotOverlapCommands(t *testing.T) {
	js := testenv.JetStream(t)
	ctx := t.Context()
	id := strings.ReplaceAll(uuid.NewString(), "-", "")[:12]
	// Under a root of the test's own (the shared server may hold a
	// deployment's orderly.* streams): StreamSubjects with its first token
	// replaced, and the commands stream under the same root.
	root := "test" + id
	filter := root + "." + strings.TrimPrefix(eventpub.StreamSubjects, eventpub.SubjectPrefix)
	events, commands := "TEST_EVENTS_"+id, "TEST_COMMANDS_"+id
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: events, Subjects: []string{filter},
		Storage: jetstream.MemoryStorage}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = js.DeleteStream(context.Background(), events) })
	if err := natsbus.EnsureStream(ctx, js, commands, root, 0); err != nil {
		t.Fatalf("the events stream %s overlaps the commands stream: %v", filter, err)
	}
	t.Cleanup(func() { _ = js.DeleteStream(context.Background(), commands) })
	// The former suggestion, <root>.>, does overlap: the check is real.
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: events + "_ALL", Subjects: []string{root + ".>"},
		Storage: jetstream.MemoryStorage}); err == nil {
		_ = js.DeleteStream(context.Background(), events+"_ALL")
		t.Fatal("a stream over <root>.> was created beside the commands stream: the server checks no overlap")
	}
	if got := eventpub.Subject("acme", event.OrderPaid); got != "orderly.acme.events.order.paid" {
		t.Fatalf("Subject = %q", got)
	}
}

func TestSubject(t *testing.T) {
	for tenant, want := range map[string]string{
		"acme": "orderly.acme.events.order.paid", "a.b": "orderly.a_b.events.order.paid", "x*y>z w": "orderly.x_y_z_w.events.order.paid",
	} {
		if got := eventpub.Subject(tenant, event.OrderPaid); got != want {
			t.Errorf("Subject(%q) = %q, want %q", tenant, got, want)
		}
	}
}
