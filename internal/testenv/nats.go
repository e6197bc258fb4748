package testenv

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// NATSURL is the JetStream server the tests use: ORDERLY_TEST_NATS_URL, by
// default the local one .ci/run starts (nats://127.0.0.1:4222).
func NATSURL() string {
	if u := os.Getenv("ORDERLY_TEST_NATS_URL"); u != "" {
		return u
	}
	return "nats://127.0.0.1:4222"
}

// JetStream connects to NATSURL and checks that it has JetStream; the
// connection is closed when t ends. Without a server it skips t, or fails
// it in CI (CI=true, or ORDERLY_REQUIRE_NATS=1 as .ci/run sets).
func JetStream(t testing.TB) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(NATSURL(), nats.Timeout(2*time.Second))
	if err == nil {
		var js jetstream.JetStream
		if js, err = jetstream.New(nc); err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if _, err = js.AccountInfo(ctx); err == nil {
				t.Cleanup(nc.Close)
				return js
			}
		}
		nc.Close()
	}
	msg := fmt.Sprintf("NATS JetStream tests need a server with JetStream at %s (set ORDERLY_TEST_NATS_URL, or start one: "+
		"nats-server -a 127.0.0.1 -p 4222 -js): %v", NATSURL(), err)
	if os.Getenv("CI") == "true" || os.Getenv("ORDERLY_REQUIRE_NATS") == "1" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return nil
}
