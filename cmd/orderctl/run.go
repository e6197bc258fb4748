package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/orderly/orderly/client"
)

// Exit statuses; the package documentation lists them for users.
const (
	exitOK        = 0
	exitUsage     = 1
	exitRejected  = 2
	exitDeclined  = 3
	exitConflict  = 4
	exitFailure   = 5
	exitNotFound  = 6
	defaultURL    = "http://127.0.0.1:8080"
	defaultAPIKey = "sk_dev_orderly_local"
	defaultTO     = 30 * time.Second
)

const usageText = `usage: orderctl [global flags] <command> [args]

Commands:
  create      --customer ID --currency CUR --item sku:qty:unit_price ... | --file body.json
  get         ID
  list        [--state S] [--customer ID] [--limit N] [--cursor C]
  pay         ID --method PM [--amount MINOR --currency CUR]
              (without --amount and --currency, the order's are used)
  fulfill     ID
  cancel      ID
  refund      ID --amount MINOR --currency CUR [--reason TEXT]
  key-status  KEY

Global flags (before or after the command):
  --url URL              API base URL (ORDERLY_URL, default http://127.0.0.1:8080)
  --api-key KEY          API key (ORDERLY_API_KEY, default sk_dev_orderly_local)
  --idempotency-key KEY  key of create, pay, fulfill, cancel or refund (default a new UUIDv4);
                         reuse a printed key to retry an operation safely
  --json                 print the response as JSON (errors as problem JSON on stderr)
  --timeout D            overall deadline, retries included (default 30s; 0 for none)

Amounts are in minor currency units: 2500 USD is 25.00.

Exit status:
  0  success
  1  usage error (nothing was sent)
  2  request rejected (4xx other than below)
  3  payment declined (402)
  4  conflict (409)
  5  server or network failure after retries (the printed key retries safely)
  6  not found (404)
`

// globals are the flags every command accepts.
type globals struct {
	url     string
	apiKey  string
	key     string
	json    bool
	timeout time.Duration
}

// bind registers the global flags on fs with zero defaults, so help never
// shows a key taken from the environment.
func (g *globals) bind(fs *flag.FlagSet) {
	fs.StringVar(&g.url, "url", "", "API base URL (ORDERLY_URL, default "+defaultURL+")")
	fs.StringVar(&g.apiKey, "api-key", "", "API key (ORDERLY_API_KEY, default the development key)")
	fs.StringVar(&g.key, "idempotency-key", "", "idempotency key of a create, pay, fulfill, cancel or refund (default a new UUIDv4)")
	fs.BoolVar(&g.json, "json", false, "print the response as JSON")
	fs.DurationVar(&g.timeout, "timeout", defaultTO, "overall deadline, retries included; 0 for none")
}

// override copies into g the global flags set on fs, whose values are in
// from.
func (g *globals) override(fs *flag.FlagSet, from *globals) {
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "url":
			g.url = from.url
		case "api-key":
			g.apiKey = from.apiKey
		case "idempotency-key":
			g.key = from.key
		case "json":
			g.json = from.json
		case "timeout":
			g.timeout = from.timeout
		}
	})
}

// usageError is a mistake in the command line; nothing was sent.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// session is one invocation's output and client.
type session struct {
	g      globals
	stdout io.Writer
	stderr io.Writer
	c      *client.Client
}

// command is one subcommand. setup registers its flags on fs and returns
// the function that runs it with the positional arguments.
type command struct {
	name    string
	args    []string // names of the required positional arguments
	keyed   bool     // side-effecting: takes --idempotency-key
	summary string
	setup   func(fs *flag.FlagSet) func(ctx context.Context, s *session, args []string) error
}

// run is orderctl: it parses args, runs one command against the API and
// returns the exit status. env reads the environment.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, env func(string) string) int {
	g := globals{url: defaultURL, apiKey: defaultAPIKey, timeout: defaultTO}
	if v := env("ORDERLY_URL"); v != "" {
		g.url = v
	}
	if v := env("ORDERLY_API_KEY"); v != "" {
		g.apiKey = v
	}

	var topFlags globals
	top := flag.NewFlagSet("orderctl", flag.ContinueOnError)
	top.SetOutput(io.Discard)
	topFlags.bind(top)
	switch err := top.Parse(args); {
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprint(stdout, usageText)
		return exitOK
	case err != nil:
		return usage(stderr, err)
	}
	g.override(top, &topFlags)
	if top.NArg() == 0 {
		return usage(stderr, usagef("no command given"))
	}
	name, rest := top.Arg(0), top.Args()[1:]
	if name == "help" {
		fmt.Fprint(stdout, usageText)
		return exitOK
	}
	var cmd *command
	for i := range commands {
		if commands[i].name == name {
			cmd = &commands[i]
		}
	}
	if cmd == nil {
		return usage(stderr, usagef("unknown command %q", name))
	}

	var cmdFlags globals
	fs := flag.NewFlagSet("orderctl "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	cmdFlags.bind(fs)
	exec := cmd.setup(fs)
	pos, err := parseInterspersed(fs, rest)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprintf(stdout, "usage: orderctl %s %s\n\n%s\n\nFlags:\n", name, strings.Join(upper(cmd.args), " "), cmd.summary)
		fs.SetOutput(stdout)
		fs.PrintDefaults()
		return exitOK
	}
	if err != nil {
		return usage(stderr, err)
	}
	g.override(fs, &cmdFlags)
	if len(pos) != len(cmd.args) {
		return usage(stderr, usagef("%s takes %d argument(s) (%s), got %d", name, len(cmd.args), strings.Join(upper(cmd.args), " "), len(pos)))
	}
	for i, p := range pos {
		if strings.TrimSpace(p) == "" {
			return usage(stderr, usagef("%s: %s must not be empty", name, upper(cmd.args)[i]))
		}
	}
	if g.key != "" && !cmd.keyed {
		return usage(stderr, usagef("--idempotency-key applies to create, pay, fulfill, cancel and refund, not %s", name))
	}
	if g.key != "" && !validKey(g.key) {
		return usage(stderr, usagef("--idempotency-key must be 1 to 255 visible ASCII characters"))
	}
	if g.timeout < 0 {
		return usage(stderr, usagef("--timeout must not be negative"))
	}
	c, err := client.New(g.url, g.apiKey, client.WithUserAgent("orderctl/1 "+client.DefaultUserAgent))
	if err != nil {
		return usage(stderr, usagef("--url: %v", err))
	}
	if g.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, g.timeout)
		defer cancel()
	}
	s := &session{g: g, stdout: stdout, stderr: stderr, c: c}
	if err := exec(ctx, s, pos); err != nil {
		return s.fail(err)
	}
	return exitOK
}

// parseInterspersed parses fs from args allowing flags after positional
// arguments ("pay ID --amount 1"), and returns the positional arguments.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

// usage reports a usage error and returns exitUsage.
func usage(stderr io.Writer, err error) int {
	fmt.Fprintf(stderr, "orderctl: %v\nRun 'orderctl -h' for usage.\n", err)
	return exitUsage
}

func upper(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = strings.ToUpper(s)
	}
	return out
}

// validKey mirrors the keys Orderly accepts: 1 to 255 visible ASCII
// characters.
func validKey(k string) bool {
	if len(k) == 0 || len(k) > 255 {
		return false
	}
	for i := 0; i < len(k); i++ {
		if k[i] < 0x21 || k[i] > 0x7e {
			return false
		}
	}
	return true
}

// exitCode maps a failed call to the exit status.
func exitCode(err error) int {
	var ue *usageError
	var apiErr *client.Error
	switch {
	case errors.As(err, &ue):
		return exitUsage
	case errors.As(err, &apiErr):
		switch s := apiErr.StatusCode; {
		case s == http.StatusNotFound:
			return exitNotFound
		case s == http.StatusPaymentRequired:
			return exitDeclined
		case s == http.StatusConflict:
			return exitConflict
		case s == http.StatusTooManyRequests || s >= 500:
			return exitFailure
		case s >= 400:
			return exitRejected
		}
	}
	return exitFailure
}
