// Command orderctl is a command-line client of the Orderly order service,
// built on package github.com/orderly/orderly/client: every side-effecting
// command sends one Idempotency-Key and retries network failures, 409
// "in progress", 429 and 5xx answers with that same key, so running a
// command again after a failure never moves money twice.
//
// Usage:
//
//	orderctl [global flags] <command> [args]
//
// Commands:
//
//	create      --customer ID --currency CUR --item sku:qty:unit_price ... | --file body.json
//	get         ID
//	list        [--state S] [--customer ID] [--limit N] [--cursor C]
//	pay         ID --method PM [--amount MINOR --currency CUR]
//	fulfill     ID
//	cancel      ID
//	refund      ID --amount MINOR --currency CUR [--reason TEXT]
//	key-status  KEY
//
// Global flags, accepted before or after the command:
//
//	--url URL              API base URL (ORDERLY_URL, default http://127.0.0.1:8080)
//	--api-key KEY          API key (ORDERLY_API_KEY, default the development key sk_dev_orderly_local)
//	--idempotency-key KEY  key of create, pay, fulfill, cancel or refund (default a new UUIDv4)
//	--json                 print the response as JSON (errors as problem JSON on stderr)
//	--timeout D            overall deadline, retries included (default 30s; 0 for none)
//
// Amounts are in minor currency units (2500 is 25.00 USD), as in the API.
// When a side-effecting command fails with exit status 5 the request may
// or may not have taken effect; orderctl prints its key, and running the
// command again with --idempotency-key KEY is safe and tells which.
//
// Exit status:
//
//	0  success
//	1  usage error (bad flags or arguments; nothing was sent)
//	2  request rejected (a 4xx other than those below: invalid input, unauthorized, mismatch, key reused)
//	3  payment declined (402)
//	4  conflict (409: invalid transition, or a request with the key still in progress)
//	5  server or network failure after retries (5xx, 429, no response, timeout)
//	6  not found (404)
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr, os.Getenv)
	stop()
	os.Exit(code)
}
