package operator

import (
	"crypto/sha256"
	"crypto/subtle"
	"time"

	"golang.org/x/time/rate"
)

// Authenticator maps operator tokens to credentials, with the failed-login
// limit of the operator API: each client address may fail
// failuresPerMinute times a minute (its burst too), then it is refused
// until its bucket refills. The web console (package operator/console)
// logs operators in with one. It is safe for concurrent use.
type Authenticator struct {
	creds  map[[32]byte]Credential
	byName map[string]Credential
	failed *limiters
	now    func() time.Time
}

// NewAuthenticator returns an Authenticator of creds; failuresPerMinute
// ≤ 0 is DefaultAuthFailuresPerMinute, a nil now is time.Now.
func NewAuthenticator(creds []Credential, failuresPerMinute int, now func() time.Time) *Authenticator {
	if failuresPerMinute <= 0 {
		failuresPerMinute = DefaultAuthFailuresPerMinute
	}
	if now == nil {
		now = time.Now
	}
	a := &Authenticator{creds: map[[32]byte]Credential{}, byName: map[string]Credential{}, now: now,
		failed: &limiters{limit: rate.Limit(float64(failuresPerMinute) / 60), burst: failuresPerMinute, m: map[string]*rate.Limiter{}}}
	for _, c := range creds {
		a.creds[sha256.Sum256([]byte(c.Token))] = c
		a.byName[c.Name] = c
	}
	return a
}

// Login returns the credential whose token is token. When addr (the
// client's address) has no failure left, it answers refused with the
// whole seconds to wait (at least 1) before looking at the token; an
// unknown token costs addr one failure.
func (a *Authenticator) Login(addr, token string) (c Credential, ok bool, retryAfter int) {
	now := a.now()
	if wait, refused := a.failed.refused(addr, now); refused {
		return Credential{}, false, wait
	}
	c, ok = a.creds[sha256.Sum256([]byte(token))]
	if !ok {
		a.failed.fail(addr, now)
	}
	return c, ok, 0
}

// Current returns the credential named name if it is still configured
// with a token whose SHA-256 is tokenHash: a session of a credential
// since removed, or whose token changed, ends.
func (a *Authenticator) Current(name string, tokenHash [32]byte) (Credential, bool) {
	c, ok := a.byName[name]
	if !ok {
		return Credential{}, false
	}
	h := sha256.Sum256([]byte(c.Token))
	return c, subtle.ConstantTimeCompare(h[:], tokenHash[:]) == 1
}
