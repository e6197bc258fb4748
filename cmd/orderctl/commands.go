package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/orderly/orderly/client"
	"github.com/orderly/orderly/order"
)

// commands lists every subcommand, in the order of the help text.
var commands = []command{
	{name: "create", keyed: true, summary: "Create an order from flags or from a JSON body file.", setup: setupCreate},
	{name: "get", args: []string{"id"}, summary: "Show an order.", setup: setupGet},
	{name: "list", summary: "List orders, newest first.", setup: setupList},
	{name: "pay", args: []string{"id"}, keyed: true, summary: "Pay an order (amount in minor units).", setup: setupPay},
	{name: "fulfill", args: []string{"id"}, keyed: true, summary: "Fulfil a paid order.", setup: setupEvent((*client.Client).FulfillOrder)},
	{name: "cancel", args: []string{"id"}, keyed: true, summary: "Cancel an unpaid order.", setup: setupEvent((*client.Client).CancelOrder)},
	{name: "refund", args: []string{"id"}, keyed: true, summary: "Refund part of a paid or fulfilled order (amount in minor units).", setup: setupRefund},
	{name: "key-status", args: []string{"key"}, summary: "Show what the server knows of an idempotency key.", setup: setupKeyStatus},
}

// callOpts are the options of a side-effecting call.
func (s *session) callOpts() []client.CallOption {
	if s.g.key == "" {
		return nil
	}
	return []client.CallOption{client.WithIdempotencyKey(s.g.key)}
}

func setupCreate(fs *flag.FlagSet) func(context.Context, *session, []string) error {
	var customer, currency, file string
	var items []order.Item
	fs.StringVar(&customer, "customer", "", "customer id")
	fs.StringVar(&currency, "currency", "", "ISO 4217 currency code, such as USD")
	fs.Func("item", "an item as sku:quantity:unit_price (minor units); repeat for more", func(v string) error {
		it, err := parseItem(v)
		if err == nil {
			items = append(items, it)
		}
		return err
	})
	fs.StringVar(&file, "file", "", "JSON file with the whole body {customer_id, currency, items}")
	return func(ctx context.Context, s *session, _ []string) error {
		var in order.NewOrderInput
		switch {
		case file != "" && (customer != "" || currency != "" || len(items) > 0):
			return usagef("create: use either --file or --customer/--currency/--item, not both")
		case file != "":
			raw, err := os.ReadFile(file)
			if err != nil {
				return usagef("create: --file: %v", err)
			}
			dec := json.NewDecoder(bytes.NewReader(raw))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&in); err != nil {
				return usagef("create: --file %s: %v", file, err)
			}
		case customer == "" || currency == "" || len(items) == 0:
			return usagef("create: --customer, --currency and at least one --item are required (or --file)")
		default:
			in = order.NewOrderInput{CustomerID: customer, Currency: currency, Items: items}
		}
		res, err := s.c.CreateOrder(ctx, in, s.callOpts()...)
		s.keyUsed(res)
		if err != nil {
			return err
		}
		return s.printOrder(res, false)
	}
}

// parseItem parses sku:quantity:unit_price; the SKU may itself contain
// colons.
func parseItem(v string) (order.Item, error) {
	rest, price, ok1 := cutLast(v, ":")
	sku, qty, ok2 := cutLast(rest, ":")
	if !ok1 || !ok2 || sku == "" {
		return order.Item{}, fmt.Errorf("want sku:quantity:unit_price, got %q", v)
	}
	q, err := strconv.ParseInt(qty, 10, 64)
	if err != nil {
		return order.Item{}, fmt.Errorf("quantity %q of %q is not an integer", qty, v)
	}
	p, err := strconv.ParseInt(price, 10, 64)
	if err != nil {
		return order.Item{}, fmt.Errorf("unit price %q of %q is not an integer (minor units)", price, v)
	}
	return order.Item{SKU: sku, Quantity: q, UnitPrice: p}, nil
}

func cutLast(s, sep string) (before, after string, ok bool) {
	i := strings.LastIndex(s, sep)
	if i < 0 {
		return s, "", false
	}
	return s[:i], s[i+len(sep):], true
}

func setupGet(fs *flag.FlagSet) func(context.Context, *session, []string) error {
	return func(ctx context.Context, s *session, args []string) error {
		res, err := s.c.GetOrder(ctx, args[0])
		if err != nil {
			return err
		}
		return s.printOrder(res, true)
	}
}

func setupList(fs *flag.FlagSet) func(context.Context, *session, []string) error {
	var p client.ListParams
	var state string
	fs.StringVar(&state, "state", "", "only orders in this state: RCVD, PAID, FULFILLED or CANCELLED")
	fs.StringVar(&p.CustomerID, "customer", "", "only this customer's orders")
	fs.IntVar(&p.Limit, "limit", 0, "page size, 1 to 100 (default the server's, 20)")
	fs.StringVar(&p.Cursor, "cursor", "", "the next-page cursor a previous list printed")
	return func(ctx context.Context, s *session, _ []string) error {
		if p.Limit < 0 || p.Limit > 100 {
			return usagef("list: --limit must be from 1 to 100")
		}
		p.State = order.State(strings.ToUpper(state))
		if p.State != "" && !p.State.Valid() {
			return usagef("list: --state must be one of RCVD, PAID, FULFILLED, CANCELLED")
		}
		res, err := s.c.ListOrders(ctx, p)
		if err != nil {
			return err
		}
		if s.g.json {
			return s.printJSON(res.Value)
		}
		if len(res.Value.Data) == 0 {
			fmt.Fprintln(s.stdout, "no orders")
		}
		for _, o := range res.Value.Data {
			fmt.Fprintln(s.stdout, orderLine(o))
		}
		if res.Value.NextCursor != "" {
			fmt.Fprintf(s.stdout, "next page: --cursor %s\n", res.Value.NextCursor)
		}
		return nil
	}
}

func setupPay(fs *flag.FlagSet) func(context.Context, *session, []string) error {
	var amount, currency, method string
	fs.StringVar(&amount, "amount", "", "amount in minor units; must equal the order's (default the order's)")
	fs.StringVar(&currency, "currency", "", "currency; must equal the order's (default the order's)")
	fs.StringVar(&method, "method", "", "payment method id, such as pm_card_visa (required)")
	return func(ctx context.Context, s *session, args []string) error {
		id := args[0]
		if method == "" {
			return usagef("pay: --method is required")
		}
		in := client.PayInput{Currency: currency, PaymentMethod: method}
		switch {
		case amount == "" && currency == "":
			// Pay what the order says; the server checks it either way.
			o, err := s.c.GetOrder(ctx, id)
			if err != nil {
				return err
			}
			in.Amount, in.Currency = o.Value.Amount, o.Value.Currency
		case amount == "" || currency == "":
			return usagef("pay: give both --amount and --currency, or neither to use the order's")
		default:
			n, err := strconv.ParseInt(amount, 10, 64)
			if err != nil {
				return usagef("pay: --amount %q is not an integer (minor units: 2500 is 25.00)", amount)
			}
			in.Amount = n
		}
		res, err := s.c.PayOrder(ctx, id, in, s.callOpts()...)
		if res != nil {
			s.g.key = res.IdempotencyKey
		}
		if err != nil {
			return err
		}
		return s.printPay(res)
	}
}

// setupEvent makes fulfil and cancel: an order id, no body.
func setupEvent(call func(*client.Client, context.Context, string, ...client.CallOption) (*client.Response[order.Order], error)) func(*flag.FlagSet) func(context.Context, *session, []string) error {
	return func(fs *flag.FlagSet) func(context.Context, *session, []string) error {
		return func(ctx context.Context, s *session, args []string) error {
			res, err := call(s.c, ctx, args[0], s.callOpts()...)
			s.keyUsed(res)
			if err != nil {
				return err
			}
			return s.printOrder(res, false)
		}
	}
}

func setupKeyStatus(fs *flag.FlagSet) func(context.Context, *session, []string) error {
	return func(ctx context.Context, s *session, args []string) error {
		res, err := s.c.KeyStatus(ctx, args[0])
		if err != nil {
			return err
		}
		if s.g.json {
			return s.printJSON(res.Value)
		}
		k := res.Value
		line := fmt.Sprintf("key %s %s", k.Key, k.State)
		if k.ResourceID != "" {
			line += " order " + k.ResourceID
		}
		if k.StatusCode != 0 {
			line += fmt.Sprintf(" status %d", k.StatusCode)
		}
		if !k.ExpiresAt.IsZero() {
			line += " expires " + k.ExpiresAt.UTC().Format("2006-01-02T15:04:05Z07:00")
		}
		fmt.Fprintln(s.stdout, line)
		return nil
	}
}

// setupRefund makes refund: an order id, --amount (minor units) and
// --currency, both required (money is never defaulted), and an optional
// --reason. It prints the refund and the order's totals.
func setupRefund(fs *flag.FlagSet) func(context.Context, *session, []string) error {
	var amount, currency, reason string
	fs.StringVar(&amount, "amount", "", "amount to refund in minor units (required)")
	fs.StringVar(&currency, "currency", "", "the order's currency (required)")
	fs.StringVar(&reason, "reason", "", "why (optional, at most 500 bytes)")
	return func(ctx context.Context, s *session, args []string) error {
		if amount == "" || currency == "" {
			return usagef("refund: --amount and --currency are required")
		}
		n, err := strconv.ParseInt(amount, 10, 64)
		if err != nil {
			return usagef("refund: --amount %q is not an integer (minor units: 2500 is 25.00)", amount)
		}
		res, err := s.c.RefundOrder(ctx, args[0], client.RefundInput{Amount: n, Currency: currency, Reason: reason}, s.callOpts()...)
		if res != nil {
			s.g.key = res.IdempotencyKey
		}
		if err != nil {
			return err
		}
		if s.g.json {
			return s.printJSON(res.Value)
		}
		r := res.Value
		line := fmt.Sprintf("%s refunded %s of order %s: %s of %s captured refunded", r.ID, money(r.Amount, r.Currency), r.OrderID,
			money(r.AmountRefunded, r.Currency), money(r.AmountCaptured, r.Currency))
		if res.Replayed {
			line += " (replayed)"
		}
		fmt.Fprintln(s.stdout, line)
		return nil
	}
}
