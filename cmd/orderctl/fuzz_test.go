package main

import (
	"strconv"
	"testing"
)

// FuzzParseItem: the item parser never panics, and an item it accepts has a
// SKU and prints back to a spelling that parses to the same item.
func FuzzParseItem(f *testing.F) {
	for _, seed := range []string{"book:2:1250", "ns:sku:1:0", ":1:1", "a::1", "a:1:", "a:-1:9223372036854775807",
		"a:1:99999999999999999999", "a:+1:0x10", "::"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, v string) {
		it, err := parseItem(v)
		if err != nil {
			return
		}
		if it.SKU == "" {
			t.Fatalf("parseItem(%q) = %+v: an item without a SKU", v, it)
		}
		again, err := parseItem(it.SKU + ":" + strconv.FormatInt(it.Quantity, 10) + ":" + strconv.FormatInt(it.UnitPrice, 10))
		if err != nil || again != it {
			t.Fatalf("parseItem(%q) = %+v, which prints back to %+v, %v", v, it, again, err)
		}
	})
}
