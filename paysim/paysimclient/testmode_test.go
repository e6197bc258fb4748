package paysimclient_test

import (
	"context"
	"errors"
	"testing"

	"github.com/orderly/orderly/fulfillment"
	"github.com/orderly/orderly/payment"
	"github.com/orderly/orderly/paysim"
	"github.com/orderly/orderly/paysim/simulator"
	"github.com/orderly/orderly/paysim/testmode"
)

// The test payment methods and SKUs of package testmode mean the same
// through paysim and through the in-process simulators: the same outcome,
// decline code and message, or out-of-stock error.
func TestTestModeMatchesTheSimulators(t *testing.T) {
	t.Parallel()
	p := startProvider(t, paysim.Faults{})
	ctx := context.Background()

	t.Run("charges", func(t *testing.T) {
		gw, sim := newIntents(t, p.URL), simulator.NewIntentGateway()
		for _, method := range []string{testmode.MethodApproved, testmode.MethodDeclined, testmode.MethodInsufficientFunds, ""} {
			orderID := "ord_" + method
			overHTTP, errHTTP := gw.Confirm(ctx, confirmReq(orderID, prepare(t, gw, orderID), method))
			inProcess, errSim := sim.Confirm(ctx, confirmReq(orderID, prepare(t, sim, orderID), method))
			var dHTTP, dSim *payment.DeclineError
			switch {
			case errHTTP == nil && errSim == nil:
				if overHTTP.Status != inProcess.Status || overHTTP.AmountReceived != inProcess.AmountReceived {
					t.Errorf("%q: paysim confirmed %+v, the simulator %+v", method, overHTTP, inProcess)
				}
			case errors.As(errHTTP, &dHTTP) && errors.As(errSim, &dSim):
				if *dHTTP != *dSim {
					t.Errorf("%q: paysim declined with %+v, the simulator with %+v", method, *dHTTP, *dSim)
				}
				if code, msg := testmode.Decline(method); dSim.Code != code || dSim.Message != msg {
					t.Errorf("%q: declined with %+v, testmode.Decline says %q, %q", method, *dSim, code, msg)
				}
			default:
				t.Errorf("%q: paysim answered %v, the simulator %v", method, errHTTP, errSim)
			}
		}
	})

	t.Run("shipments", func(t *testing.T) {
		wh, sim := newWarehouse(t, p.URL), simulator.NewWarehouse()
		for _, sku := range []string{"sku_mug", testmode.SKUOutOfStock} {
			req := shipReq("ord_"+sku, "sku_tee", sku)
			_, errHTTP := wh.Ship(ctx, req)
			_, errSim := sim.Ship(ctx, req)
			if (errHTTP == nil) != (errSim == nil) || (errHTTP != nil && errHTTP.Error() != errSim.Error()) {
				t.Errorf("%q: paysim answered %v, the simulator %v", sku, errHTTP, errSim)
			}
			if wantOut := testmode.OutOfStock(sku) != ""; errors.Is(errSim, fulfillment.ErrOutOfStock) != wantOut {
				t.Errorf("%q: simulator error %v, want out of stock %v", sku, errSim, wantOut)
			}
		}
	})
}
