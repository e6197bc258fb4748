// Package testclock is the controllable clock a test gives the service and
// the store together. Leases, schedules and key retention are decided on the
// database's clock, so a test that moves time must move it there too: the
// service reads the clock as its Config.Now, the embedded store takes it as
// its clock (sqlite.WithClock), and a test PostgreSQL database follows it
// (pgtest.FollowClock). Moving the clock then expires a lease on every side
// at once, without waiting for real time to pass.
package testclock

import (
	"sync"
	"time"
)

// Start is the instant New clocks start at unless told otherwise: UTC, with
// microsecond digits (the precision both stores keep).
var Start = time.Date(2026, time.November, 30, 12, 0, 0, 0, time.UTC)

// Clock is a time source that moves only when told. Safe for concurrent
// use.
type Clock struct {
	mu        sync.Mutex
	now       time.Time
	followers []func(time.Time)
}

// New returns a clock reading t.
func New(t time.Time) *Clock { return &Clock{now: t} }

// Now returns the clock's reading.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d and tells every follower.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.set(c.now.Add(d))
}

// Set moves the clock to t (backwards too) and tells every follower.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !t.Equal(c.now) {
		c.set(t)
	}
}

func (c *Clock) set(t time.Time) {
	c.now = t
	for _, f := range c.followers {
		f(t)
	}
}

// Follow calls f with the current reading now and with every later one,
// in order: a database clock kept in step with this one.
func (c *Clock) Follow(f func(time.Time)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.followers = append(c.followers, f)
	f(c.now)
}
