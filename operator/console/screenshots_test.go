package console_test

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/orderly/orderly/internal/testenv"
	"github.com/orderly/orderly/operator/console"
	"github.com/orderly/orderly/order"
	"github.com/orderly/orderly/service"
)

// TestScreenshots saves a PNG of each console page into the directory
// $ORDERLY_CONSOLE_SCREENSHOTS (the README's are made with
// ORDERLY_CONSOLE_SCREENSHOTS=$PWD/docs/console go test -run TestScreenshots ./operator/console/);
// without it, it skips. The scene: a paid order, a cancelled one, a
// parked charge that was rechecked, a delivery failed with a 410.
func TestScreenshots(t *testing.T) {
	dir := os.Getenv("ORDERLY_CONSOLE_SCREENSHOTS")
	if dir == "" {
		t.Skip("set ORDERLY_CONSOLE_SCREENSHOTS to a directory to save the console's screenshots there")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	ctx := browser(t)
	f := newFixture(t, testenv.SQLite, console.Config{})
	bg := context.Background()
	paid := f.create(order.NewOrderInput{CustomerID: "cus_ada", Currency: "USD", Items: []order.Item{
		{SKU: "mug", Quantity: 2, UnitPrice: 1250}, {SKU: "beans-1kg", Quantity: 1, UnitPrice: 2400}}})
	if st, body := f.pay(paid, "pay-ada-1", "pm_card_visa"); st != http.StatusOK {
		t.Fatalf("pay: %d %s", st, body)
	}
	gone := f.create(order.NewOrderInput{CustomerID: "cus_bo", Currency: "KWD", Items: []order.Item{{SKU: "dates", Quantity: 3, UnitPrice: 1500}}})
	o, a := f.park()
	rcv := newReceiver(t)
	ep, _, _ := f.failedDelivery(rcv)
	call := func(key, reason string) service.OperatorCall {
		return service.OperatorCall{Operator: service.Operator{Name: "olga", Role: "operator"}, Key: key, Fingerprint: key, Reason: reason}
	}
	if _, err := f.ops.CancelOrder(bg, call("shot-1", "customer called: ticket 7"), gone.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := f.ops.Recheck(bg, call("shot-2", "ticket 42: is the charge there?"), a.ProviderKey); err != nil {
		t.Fatal(err)
	}
	base := f.console.URL + console.Prefix
	shot := func(name string) {
		t.Helper()
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	page := func(path, wait, name string) {
		t.Helper()
		do(t, ctx, chromedp.Navigate(base+path), chromedp.WaitVisible(chromedp.CSS(wait)))
		shot(name)
	}
	do(t, ctx, chromedp.Navigate(base+"login"), chromedp.WaitVisible(chromedp.CSS("#token")))
	shot("login")
	login(t, ctx, base, operatorToken)
	shot("overview")
	page("orders", "#orders", "orders")
	page("orders?q=pay-1", "#orders", "orders-search")
	page("orders/"+o.ID, "#timeline", "order")
	page("attempts", "form.resolve", "attempts")
	sec := `section[id="attempt-` + o.ID + `"] `
	do(t, ctx, chromedp.SetValue(chromedp.CSS(sec+`form.resolve select[name="outcome"]`), "not_succeeded"),
		chromedp.SendKeys(chromedp.CSS(sec+`form.resolve input[name="note"]`), "PSP dashboard shows no charge"),
		chromedp.SendKeys(chromedp.CSS(sec+`form.resolve input[name="reason"]`), "ticket 42"),
		chromedp.Click(chromedp.CSS(sec+`form.resolve button[type="submit"]`)), chromedp.WaitVisible(chromedp.CSS("#result")))
	shot("resolved")
	page("endpoints", "#endpoints", "endpoints")
	page("endpoints/"+ep.ID, "#deliveries", "endpoint")
	page("deliveries", "#deliveries", "deliveries")
	page("orders/"+paid.ID, "#timeline", "order-paid")
	page("audit", "#audit", "audit")
	rctx := browser(t)
	login(t, rctx, base, readerToken)
	do(t, rctx, chromedp.Navigate(base+"deliveries"), chromedp.WaitVisible(chromedp.CSS("#deliveries")))
	png, err := chromedp.Run(rctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "reader.png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
}
