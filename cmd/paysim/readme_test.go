package main

import (
	"errors"
	"flag"
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
