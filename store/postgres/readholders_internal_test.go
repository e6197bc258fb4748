package postgres

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/orderly/orderly/idempotency"
	"github.com/orderly/orderly/order"
	"github.com/orderly/orderly/store"
	"github.com/orderly/orderly/store/pgtest"
)

// TestReadHoldersSkipsKeysWrittenHere: readHolders, the last statement of
// CreateOrders' batch, returns the keys other transactions wrote and not
// the ones its own transaction wrote (the keys the batch's claim just
// took), so a new create does not read its own key and order back (issue
// 19). Outside a writing transaction it returns every key asked for.
func TestReadHoldersSkipsKeysWrittenHere(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, pgtest.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	var hashes []string
	for _, key := range []string{"mine", "theirs"} {
		o, err := order.New("tenant-a", order.NewOrderInput{CustomerID: "cus_1", Currency: "EUR",
			Items: []order.Item{{SKU: "SKU-1", Quantity: 1, UnitPrice: 100}}}, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		c := &store.Claim{Record: idempotency.Record{TenantID: "tenant-a", KeyHash: idempotency.HashKey(key),
			Fingerprint: "fp-" + key, Operation: idempotency.OpCreate, ResourceID: o.ID, State: idempotency.StateCompleted},
			TTL: time.Hour}
		if out, err := s.CreateOrders(ctx, []store.NewOrder{{Key: c, Order: o}}); err != nil || out[0] != nil {
			t.Fatalf("CreateOrders(%s) = %v, %v; want created", key, out, err)
		}
		hashes = append(hashes, c.KeyHash)
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	readKeys := func() []string {
		t.Helper()
		rows, err := tx.Query(ctx, readHolders, []string{"tenant-a", "tenant-a"}, hashes)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var got []string
		for rows.Next() {
			var now time.Time
			var kc keyCols
			var oc orderCols
			if err := rows.Scan(targets([]any{&now}, kc.targets(), oc.targets())...); err != nil {
				t.Fatal(err)
			}
			r, _ := kc.record()
			got = append(got, r.KeyHash)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		slices.Sort(got)
		return got
	}
	all := slices.Sorted(slices.Values(hashes))
	if got := readKeys(); !slices.Equal(got, all) {
		t.Fatalf("readHolders before this transaction wrote = %v, want both keys %v", got, all)
	}
	// This transaction writes the first key, as claimMany does a claim.
	if _, err := tx.Exec(ctx, `UPDATE idempotency_keys SET fingerprint = fingerprint WHERE key_hash = $1`, hashes[0]); err != nil {
		t.Fatal(err)
	}
	if got := readKeys(); !slices.Equal(got, hashes[1:]) {
		t.Fatalf("readHolders after this transaction wrote %s = %v, want only the other key %v", hashes[0], got, hashes[1:])
	}
}
