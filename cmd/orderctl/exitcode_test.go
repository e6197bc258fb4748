package main

import (
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/orderly/orderly/internal/proctest"
	"github.com/orderly/orderly/internal/testenv"
)

// TestExitCodesOfTheBuiltBinary runs the built orderctl (go run would
// report every failure as its own exit status 1) against the real stack
// and checks that each documented exit status is what the process exits
// with, and that the README's table and the command's doc comment list
// exactly these statuses.
func TestExitCodesOfTheBuiltBinary(t *testing.T) {
	t.Parallel()
	bin := proctest.Build(t, "github.com/orderly/orderly/cmd/orderctl")
	s := newStack(t)
	unpaid := s.create("cus_binary")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + ln.Addr().String() // nothing listens once closed
	ln.Close()

	cases := []struct {
		code int
		what string
		url  string // default: the stack's
		args []string
	}{
		{exitOK, "success", "", []string{"get", unpaid}},
		{exitUsage, "usage error", "", []string{"frobnicate"}},
		{exitRejected, "request rejected (400)", "", []string{"create", "--customer", "c", "--currency", "usd", "--item", "x:1:1"}},
		{exitDeclined, "payment declined (402)", "", []string{"pay", unpaid, "--method", "pm_card_declined"}},
		{exitConflict, "conflict (409)", "", []string{"fulfill", unpaid}},
		{exitFailure, "network failure after retries", closed, []string{"cancel", unpaid}},
		{exitNotFound, "not found (404)", "", []string{"get", "ord_00000000000000000000000000000000"}},
	}
	var tested []int
	for _, tc := range cases {
		tested = append(tested, tc.code)
		t.Run(tc.what, func(t *testing.T) {
			url := tc.url
			if url == "" {
				url = s.env.Server.URL
			}
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, bin, tc.args...)
			cmd.Env = append(os.Environ(), "ORDERLY_URL="+url, "ORDERLY_API_KEY="+testenv.KeyA)
			out, err := cmd.CombinedOutput()
			code := 0
			var exit *exec.ExitError
			if errors.As(err, &exit) {
				code = exit.ExitCode()
			} else if err != nil {
				t.Fatalf("orderctl %s: %v", strings.Join(tc.args, " "), err)
			}
			if code != tc.code {
				t.Errorf("orderctl %s exited %d, want %d (%s)\n%s", strings.Join(tc.args, " "), code, tc.code, tc.what, out)
			}
		})
	}

	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if got := readmeExitCodes(t, string(readme)); !slices.Equal(got, tested) {
		t.Errorf("README.md's orderctl exit status table lists %v, the binary is tested for %v", got, tested)
	}
	doc, err := os.ReadFile("main.go")
	if err != nil {
		t.Fatal(err)
	}
	if got := docExitCodes(string(doc)); !slices.Equal(got, tested) {
		t.Errorf("cmd/orderctl/main.go's Exit status list has %v, the binary is tested for %v", got, tested)
	}
}

// readmeExitCodes returns the statuses of the README's table whose header
// is "| orderctl exit status | meaning |", in order.
func readmeExitCodes(t *testing.T, readme string) []int {
	t.Helper()
	_, table, ok := strings.Cut(readme, "| orderctl exit status | meaning |")
	if !ok {
		t.Fatal(`README.md has no table with the header "| orderctl exit status | meaning |"`)
	}
	row := regexp.MustCompile("^\\| `(\\d+)` \\|")
	var codes []int
	for _, line := range strings.Split(table, "\n")[2:] { // after the header's end and the rule
		m := row.FindStringSubmatch(line)
		if m == nil {
			break
		}
		n, _ := strconv.Atoi(m[1])
		codes = append(codes, n)
	}
	return codes
}

// docExitCodes returns the statuses listed under "Exit status:" in the
// command's doc comment, in order.
func docExitCodes(src string) []int {
	_, list, _ := strings.Cut(src, "// Exit status:\n//\n")
	row := regexp.MustCompile(`^//\t(\d+)  `)
	var codes []int
	for _, line := range strings.Split(list, "\n") {
		m := row.FindStringSubmatch(line)
		if m == nil {
			break
		}
		n, _ := strconv.Atoi(m[1])
		codes = append(codes, n)
	}
	return codes
}
