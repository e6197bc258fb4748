package main

import (
	"fmt"
	"time"
)

// MinLease is the shortest -lease orderd accepts: a lease shorter than a
// store round trip and a provider call expires while its holder works, and
// every request is then taken over again and again (a 3ms lease left a
// service answering 503 forever).
const MinLease = time.Second

// durationFloor is a duration setting's smallest accepted value.
type durationFloor struct {
	flag  string // the flag's name, without the dash
	value time.Duration
	floor time.Duration
}

// durationFloors lists every duration setting of c with its floor: below
// it a worker spins (intervals), every call times out (timeouts), or work
// is taken over or given up before it could be done (leases, windows).
// Relations between settings (lease above twice the provider timeout,
// lock timeout below statement timeout, ...) are checked apart.
func (c *Config) durationFloors() []durationFloor {
	return []durationFloor{
		{"idempotency-key-ttl", c.KeyTTL, time.Second},
		{"idempotency-derived-ttl", c.DerivedKeyTTL, time.Second},
		{"idempotency-tombstone-ttl", c.TombstoneTTL, time.Second},
		{"shutdown-timeout", c.ShutdownTimeout, time.Second},
		{"provider-timeout", c.ProviderTimeout, 100 * time.Millisecond},
		{"lease", c.LeaseDuration, MinLease},
		{"max-wait", c.MaxWait, 0}, // 0 takes the service's default
		{"completer-interval", c.CompleterInterval, 100 * time.Millisecond},
		{"unresolved-after", c.UnresolvedAfter, time.Minute},
		{"pending-payment-expiry", c.PendingPaymentExpiry, time.Minute},
		{"sweep-interval", c.SweepInterval, time.Second},
		{"request-timeout", c.RequestTimeout, 100 * time.Millisecond},
		// PostgreSQL counts these in milliseconds, and 0 turns them off.
		{"db-statement-timeout", c.DBStatementTimeout, time.Millisecond},
		{"db-lock-timeout", c.DBLockTimeout, time.Millisecond},
		{"database-replica-max-lag", c.ReplicaMaxLag, 100 * time.Millisecond},
		{"database-replica-check-interval", c.ReplicaCheckInterval, 10 * time.Millisecond},
		{"commands-duplicate-window", c.CommandsDuplicateWindow, 100 * time.Millisecond},
		{"webhook-retry-window", c.Events.WebhookRetryWindow, time.Minute},
		{"webhook-timeout", c.Events.WebhookTimeout, 100 * time.Millisecond},
		{"webhook-interval", c.Events.WebhookInterval, 50 * time.Millisecond}, // each claim takes SQLite's write lock
		{"webhook-backoff", c.Events.WebhookBackoff, 10 * time.Millisecond},
		{"publish-interval", c.Events.PublishInterval, 10 * time.Millisecond},
	}
}

// checkDurationFloors refuses a duration setting below its floor, naming
// the flag, its environment variable, the floor and the value given.
func (c *Config) checkDurationFloors() error {
	for _, f := range c.durationFloors() {
		if f.value < f.floor {
			return fmt.Errorf("-%s (%s) must be at least %s, not %s", f.flag, envName(f.flag), f.floor, f.value)
		}
	}
	return nil
}
