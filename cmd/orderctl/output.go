package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/orderly/orderly/client"
	"github.com/orderly/orderly/order"
)

// keyUsed remembers the idempotency key of a side-effecting call, to print
// it if the call failed in a way a retry may fix.
func (s *session) keyUsed(res *client.Response[order.Order]) {
	if res != nil {
		s.g.key = res.IdempotencyKey
	}
}

// printOrder prints the order of res: one line (with the items when
// detailed), or JSON with --json.
func (s *session) printOrder(res *client.Response[order.Order], detailed bool) error {
	if s.g.json {
		return s.printJSON(res.Value)
	}
	fmt.Fprintln(s.stdout, answerLine(res.Value, res.Replayed))
	if detailed {
		for _, it := range res.Value.Items {
			fmt.Fprintf(s.stdout, "  %d × %s at %s\n", it.Quantity, it.SKU, money(it.UnitPrice, res.Value.Currency))
		}
	}
	return nil
}

// printPay prints the answer to a pay: the order's line and, for a 202
// (a payment waiting on the customer or the bank), a second line with the
// pending payment's status, intent id and next action; with --json the
// whole body, payment member included.
func (s *session) printPay(res *client.Response[client.PayResult]) error {
	if s.g.json {
		return s.printJSON(res.Value)
	}
	fmt.Fprintln(s.stdout, answerLine(res.Value.Order, res.Replayed))
	if p := res.Value.Payment; p != nil {
		pl := fmt.Sprintf("  payment %s %s", p.Status, p.IntentID)
		if na := p.NextAction; na != nil {
			pl += " next action " + na.Type
			if na.RedirectToURL != nil {
				pl += " " + na.RedirectToURL.URL
			}
		}
		fmt.Fprintln(s.stdout, pl+"; pay again with the same --idempotency-key to settle it")
	}
	return nil
}

// answerLine is o's line as an answer prints it: orderLine, with
// " (replayed)" when the answer is a replay (Idempotency-Replayed: true).
func answerLine(o order.Order, replayed bool) string {
	if replayed {
		return orderLine(o) + " (replayed)"
	}
	return orderLine(o)
}

// orderLine is the one-line summary of o, such as
// "order ord_… RCVD 25.00 USD (2 items)".
func orderLine(o order.Order) string {
	var n int64
	for _, it := range o.Items {
		n += it.Quantity
	}
	unit := "items"
	if n == 1 {
		unit = "item"
	}
	return fmt.Sprintf("order %s %s %s (%d %s)", o.ID, o.State, money(o.Amount, o.Currency), n, unit)
}

// money formats minor units of cur with the currency's decimals, such as
// "25.00 USD" or "2500 JPY".
func money(minor int64, cur string) string {
	if major, ok := order.MajorUnits(minor, cur); ok {
		return major + " " + cur
	}
	return strconv.FormatInt(minor, 10) + " minor units of " + cur
}

// printJSON writes v as indented JSON.
func (s *session) printJSON(v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(s.stdout, "%s\n", b)
	return err
}

// fail reports err on stderr and returns its exit status: "error: <title>:
// <detail>" and the invalid fields (or problem JSON with --json), plus the
// key to retry with when the outcome is unknown.
func (s *session) fail(err error) int {
	code := exitCode(err)
	var ue *usageError
	if errors.As(err, &ue) {
		return usage(s.stderr, err)
	}
	var apiErr *client.Error
	switch {
	case errors.As(err, &apiErr) && s.g.json:
		b, _ := json.Marshal(map[string]any{
			"type": apiErr.Type, "title": apiErr.Title, "status": apiErr.StatusCode,
			"detail": apiErr.Detail, "errors": apiErr.Fields,
		})
		fmt.Fprintf(s.stderr, "%s\n", b)
	case errors.As(err, &apiErr):
		msg := apiErr.Title
		if apiErr.Detail != "" {
			msg += ": " + apiErr.Detail
		}
		if apiErr.Replayed {
			msg += " (replayed)"
		}
		fmt.Fprintf(s.stderr, "error: %s\n", msg)
		for _, f := range apiErr.Fields {
			fmt.Fprintf(s.stderr, "  %s: %s\n", f.Field, f.Reason)
		}
	default:
		fmt.Fprintf(s.stderr, "error: %v\n", err)
	}
	var netErr *client.NetworkError
	if errors.As(err, &netErr) && netErr.NotSent && s.g.key != "" {
		fmt.Fprintf(s.stderr, "the request was not sent (no connection to the server); run the command again with --idempotency-key %s once the server is reachable\n", s.g.key)
		return code
	}
	if (code == exitFailure || client.IsRetryable(err)) && s.g.key != "" {
		fmt.Fprintf(s.stderr, "the request may or may not have taken effect; run the command again with --idempotency-key %s to retry it safely\n", s.g.key)
	}
	return code
}
