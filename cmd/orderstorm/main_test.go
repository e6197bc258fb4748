package main

import (
	"io"
	"testing"
)

func TestLoopbackOnly(t *testing.T) {
	for _, ok := range []string{"", "http://127.0.0.1:8080", "http://localhost:1", "http://[::1]:8080", "http://127.3.2.1:9",
		"postgres://postgres@127.0.0.1:5432/test", "sqlite:/tmp/x.db", "postgres:///test"} {
		if err := loopbackOnly(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"http://10.0.0.1:8080", "http://example.com", "postgres://u@192.168.1.2/db", "http://8.8.8.8"} {
		if loopbackOnly(bad) == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// TestBusFlags: bus commands are off by default; the NATS URL must be on
// the loopback, the fractions in [0, 1], and a stream to delete must be
// named.
func TestBusFlags(t *testing.T) {
	c, err := parseFlags([]string{"-targets", "http://127.0.0.1:1"}, io.Discard)
	if err != nil || c.Mix.BusCommands != 0 {
		t.Fatalf("defaults: bus commands %v, %v", c.Mix.BusCommands, err)
	}
	c, err = parseFlags([]string{"-targets", "http://127.0.0.1:1", "-bus-commands", "0.25", "-bus-stream", "S", "-bus-delete-stream"}, io.Discard)
	if err != nil || c.Mix.BusCommands != 0.25 || c.Mix.BusTwin != DefaultMix.BusTwin || c.Bus.Stream != "S" || !c.DeleteBusStream {
		t.Fatalf("bus flags = %+v %+v, %v", c.Mix, c.Bus, err)
	}
	for _, bad := range [][]string{
		{"-bus-commands", "1.5"},
		{"-bus-commands", "0.1", "-nats-url", "nats://10.0.0.1:4222"},
		{"-bus-delete-stream"},
	} {
		if _, err := parseFlags(append([]string{"-targets", "http://127.0.0.1:1"}, bad...), io.Discard); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// TestEntryPointFlags: provider webhooks need the spawned paysim; -reads is
// a fraction; with -spawn, bus commands need no stream name (the run makes
// its own).
func TestEntryPointFlags(t *testing.T) {
	c, err := parseFlags([]string{"-spawn", "2", "-database-url", "postgres://postgres@127.0.0.1:5432/x", "-provider-webhooks",
		"-bus-commands", "0.25", "-webhooks", "-require-all-checks"}, io.Discard)
	if err != nil || c.ProviderWebhooks == nil || c.ProviderWebhooks.DuplicateRate != 0.3 || !c.RequireAll || c.Mix.Reads != DefaultMix.Reads {
		t.Fatalf("flags = %+v, %v", c, err)
	}
	for _, bad := range [][]string{
		{"-targets", "http://127.0.0.1:1", "-provider-webhooks"},
		{"-spawn", "1", "-paysim", "http://127.0.0.1:2", "-provider-webhooks"},
		{"-spawn", "1", "-provider-webhooks", "-provider-webhook-drop-rate", "2"},
		{"-targets", "http://127.0.0.1:1", "-reads", "1.5"},
	} {
		if _, err := parseFlags(bad, io.Discard); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
