package webhook

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strconv"
	"time"

	"github.com/orderly/orderly/apperr"
	"github.com/orderly/orderly/event"
	"github.com/orderly/orderly/idempotency"
	"github.com/orderly/orderly/store"
)

// Ledger is the part of the idempotency ledger a keyed registration uses
// (store.Store has it).
type Ledger interface {
	AcquireLease(ctx context.Context, claim store.Claim) (idempotency.Record, bool, error)
	CompleteKey(ctx context.Context, lease store.Lease, outcome idempotency.Record) error
	ReleaseKey(ctx context.Context, lease store.Lease, to idempotency.State) error
}

// registrationLease is how long a registration holds its key: it calls no
// provider, only the store, twice.
const registrationLease = 30 * time.Second

// Created is the outcome of CreateOnce: the endpoint with its secret, and
// for a keyed request whether it is a replay and when its key expires.
type Created struct {
	Endpoint     event.Endpoint
	Replayed     bool
	KeyExpiresAt time.Time
}

// CreateOnce is Create under the idempotency key key (the zero Key: none),
// by the protocol of draft-ietf-httpapi-idempotency-key-header: the first
// request with a key registers the endpoint and stores the outcome under
// the key; a retry with the same key and the same request (fingerprint) is
// answered with that endpoint, its secret included, and Replayed; the key
// with another request is EKeyReused (422); while the first request runs,
// EKeyInProgress (409 with RetryAfter); past its retention, EKeyExpired.
// An invalid registration is refused before the key is claimed, so it
// stores nothing (like an invalid order).
//
// The registration holds its key under a lease, as a pay does: claim (in
// progress), insert, complete. The endpoint's id is derived from the claim
// (tenant, key, the claim's creation time), so a retry that takes over the
// key of a request that crashed between its insert and its completion
// finds that request's endpoint instead of registering a second one.
func (e *Endpoints) CreateOnce(ctx context.Context, tenantID string, key idempotency.Key, rawURL string, types []event.Type) (Created, error) {
	if key.IsZero() || e.Ledger == nil {
		ep, err := e.Create(ctx, tenantID, rawURL, types)
		return Created{Endpoint: ep}, err
	}
	ep, err := e.validate(ctx, tenantID, rawURL, types, "")
	if err != nil {
		return Created{}, err
	}
	ttl := e.KeyTTL
	if ttl <= 0 {
		ttl = idempotency.DefaultKeyTTL
	}
	if key.Derived {
		ttl = e.DerivedKeyTTL
		if ttl <= 0 {
			ttl = idempotency.DefaultDerivedKeyTTL
		}
	}
	rec, acquired, err := e.Ledger.AcquireLease(ctx, store.Claim{Record: idempotency.Record{
		TenantID: tenantID, KeyHash: idempotency.HashKey(key.Value), Fingerprint: key.Fingerprint, Derived: key.Derived,
		Operation: idempotency.OpCreate,
	}, TTL: ttl, Lease: registrationLease})
	if err != nil {
		return Created{}, err
	}
	if !acquired {
		return e.held(ctx, key, rec)
	}
	lease := store.LeaseOf(rec)
	ep.ID = claimedEndpointID(rec)
	if ep, err = e.insertOnce(ctx, ep, rec.FencingToken > 1); err != nil {
		// Nothing final happened: a retry with the key may take it over.
		if rerr := e.Ledger.ReleaseKey(ctx, lease, idempotency.StateRetryableFailure); rerr != nil && !errors.Is(rerr, store.ErrLeaseLost) {
			err = errors.Join(err, rerr)
		}
		return Created{}, err
	}
	if err := e.Ledger.CompleteKey(ctx, lease, idempotency.Record{ResourceID: ep.ID}); err != nil {
		if errors.Is(err, store.ErrLeaseLost) {
			return Created{}, apperr.Errorf(apperr.EKeyInProgress,
				"another request with this Idempotency-Key took it over; retry later with the same key")
		}
		return Created{}, err
	}
	return Created{Endpoint: ep, KeyExpiresAt: rec.ExpiresAt}, nil
}

// insertOnce stores ep. A key taken over (resumed) may have its endpoint
// stored already, by the request that crashed before completing it: then
// that endpoint, with its secret, is the outcome.
func (e *Endpoints) insertOnce(ctx context.Context, ep event.Endpoint, resumed bool) (event.Endpoint, error) {
	if resumed {
		if got, err := e.withSecret(ctx, ep.TenantID, ep.ID); err == nil {
			return got, nil
		} else if !errors.Is(err, store.ErrNotFound) {
			return event.Endpoint{}, err
		}
	}
	return ep, e.insert(ctx, ep)
}

// claimedEndpointID is the id of the endpoint a claim registers: we_ and
// the first 32 hex digits of SHA-256 over the tenant, the key's hash and
// the claim's creation time (kept by a takeover, new for a key claimed
// again after it expired).
func claimedEndpointID(r idempotency.Record) string {
	h := sha256.Sum256([]byte("webhook-endpoint\n" + r.TenantID + "\n" + r.KeyHash + "\n" +
		strconv.FormatInt(r.CreatedAt.UnixMicro(), 10)))
	return event.EndpointIDPrefix + hex.EncodeToString(h[:16])
}

// held answers a registration whose key is held: a replay of the stored
// outcome, or why there is none.
func (e *Endpoints) held(ctx context.Context, key idempotency.Key, h idempotency.Record) (Created, error) {
	switch {
	case h.Fingerprint != key.Fingerprint:
		return Created{KeyExpiresAt: h.ExpiresAt}, apperr.Errorf(apperr.EKeyReused,
			"this Idempotency-Key was used with a different request; use a new key for a new request")
	case h.State == idempotency.StateExpired || (h.State == idempotency.StateCompleted && h.Expired(e.now())):
		return Created{}, apperr.Errorf(apperr.EKeyExpired,
			"this Idempotency-Key expired at %s; retry with a new key", h.ExpiresAt.Format(time.RFC3339))
	case h.State != idempotency.StateCompleted:
		err := apperr.Errorf(apperr.EKeyInProgress,
			"a request with this Idempotency-Key is still being processed; retry later with the same key")
		if h.State == idempotency.StateInProgress {
			err.RetryAfter = time.Until(h.LockedUntil)
		}
		return Created{}, err
	case h.ErrorCode != "":
		return Created{Replayed: true, KeyExpiresAt: h.ExpiresAt}, h.Err()
	}
	ep, err := e.withSecret(ctx, h.TenantID, h.ResourceID)
	if errors.Is(err, store.ErrNotFound) {
		// Registered, then deleted: the outcome is gone with it.
		return Created{}, apperr.Errorf(apperr.ENotFound,
			"the webhook endpoint this Idempotency-Key registered, %s, has been deleted", h.ResourceID)
	}
	if err != nil {
		return Created{}, err
	}
	return Created{Endpoint: ep, Replayed: true, KeyExpiresAt: h.ExpiresAt}, nil
}

// withSecret returns the tenant's endpoint id with its secret.
func (e *Endpoints) withSecret(ctx context.Context, tenantID, id string) (event.Endpoint, error) {
	ep, err := e.Store.GetEndpoint(ctx, tenantID, id)
	if err != nil {
		return event.Endpoint{}, err
	}
	ep.Secret, err = e.Store.EndpointSecret(ctx, tenantID, id)
	return ep, err
}
