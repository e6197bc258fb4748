package main

import (
	"errors"
	"flag"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/orderly/orderly/internal/configdoc"
)

// TestREADMEConfigurationTableIsComplete: every flag of paysim has a row in
// the README's paysim table with its default, and every row is a flag.
func TestREADMEConfigurationTableIsComplete(t *testing.T) {
	var usage strings.Builder
	if _, err := ParseConfig([]string{"-h"}, &usage); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("ParseConfig(-h) = %v, want flag.ErrHelp", err)
	}
	flags := configdoc.ParseUsage(usage.String())
	if len(flags) < 15 {
		t.Fatalf("found %d flags in paysim -h; the parse of its usage is broken:\n%s", len(flags), usage.String())
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range configdoc.Check(flags, string(readme), "PAYSIM") {
		t.Error(p)
	}
}

// TestConfigErrorsNameTheSetting: a configuration error names the setting
// as a flag and as an environment variable.
func TestConfigErrorsNameTheSetting(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"-max-body-bytes", "0"}, []string{"-max-body-bytes (PAYSIM_MAX_BODY_BYTES)", "-shutdown-timeout (PAYSIM_SHUTDOWN_TIMEOUT)"}},
		{[]string{"-log-level", "loud"}, []string{"-log-level (PAYSIM_LOG_LEVEL)"}},
		{[]string{"-latency", "soon"}, []string{"-latency (PAYSIM_LATENCY)"}},
		{[]string{"-webhook-url", "http://127.0.0.1:1/"}, []string{"-webhook-secret (PAYSIM_WEBHOOK_SECRET)", "-webhook-url (PAYSIM_WEBHOOK_URL)"}},
	} {
		_, err := ParseConfig(tc.args, io.Discard)
		if err == nil {
			t.Errorf("ParseConfig(%q) succeeded, want an error", tc.args)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("ParseConfig(%q) = %q, want it to name %q", tc.args, err, w)
			}
		}
	}
}
