package webhook

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/orderly/orderly/apperr"
	"github.com/orderly/orderly/event"
	"github.com/orderly/orderly/store"
)

// MaxURLLength bounds an endpoint's URL, in bytes.
const MaxURLLength = 2048

// Endpoints manages tenants' webhook endpoints and serves the event feed.
type Endpoints struct {
	Store store.EventStore
	// Ledger, when set, is the idempotency ledger (the store.Store that
	// keeps the orders' keys): CreateOnce then stores a registration's
	// outcome under its idempotency key, as creates of orders do. Without
	// it CreateOnce registers every request anew.
	Ledger Ledger
	// KeyTTL and DerivedKeyTTL are the retention of client keys and of
	// keys derived from a fingerprint (defaults idempotency.DefaultKeyTTL
	// and idempotency.DefaultDerivedKeyTTL): the service's.
	KeyTTL, DerivedKeyTTL time.Duration
	// AllowPrivate lets endpoints target loopback, private and link-local
	// addresses (tests, a private deployment).
	AllowPrivate bool
	// AllowPrivateSetting, when set, names the server setting that allows
	// private targets (orderd: "ORDERD_WEBHOOK_ALLOW_PRIVATE=true"); the
	// refusal of a private target then says it, so an operator testing
	// with a loopback receiver knows what to change.
	AllowPrivateSetting string
	// Now is the clock (default time.Now).
	Now func() time.Time
	// MaxPerTenant caps each tenant's endpoints (0: no cap); one more is
	// refused with apperr.ELimitReached (409 limit_reached).
	MaxPerTenant int
}

// DefaultEndpointsPerTenant is orderd's default Endpoints.MaxPerTenant
// (Stripe allows 16 webhook endpoints per account): each endpoint adds a
// delivery per event, so the cap bounds the work one tenant's event makes.
const DefaultEndpointsPerTenant = 16

func (e *Endpoints) now() time.Time {
	if e.Now != nil {
		return e.Now()
	}
	return time.Now()
}

// Create registers an endpoint for tenantID that receives the events of
// types (at least one; each one of event.Types) at rawURL (http or https,
// absolute, no user info, at most MaxURLLength bytes, not resolving to a
// private address unless AllowPrivate). The returned endpoint carries its
// secret; it is never shown again. Errors: EInvalid naming the field,
// ELimitReached (the tenant has MaxPerTenant endpoints), EUnavailable.
func (e *Endpoints) Create(ctx context.Context, tenantID, rawURL string, types []event.Type) (event.Endpoint, error) {
	ep, err := e.validate(ctx, tenantID, rawURL, types, newEndpointID())
	if err != nil {
		return event.Endpoint{}, err
	}
	if err := e.insert(ctx, ep); err != nil {
		return event.Endpoint{}, err
	}
	return ep, nil
}

// insert stores ep within the tenant's cap (MaxPerTenant). Errors:
// ELimitReached, EUnavailable.
func (e *Endpoints) insert(ctx context.Context, ep event.Endpoint) error {
	if err := e.Store.CreateEndpoint(ctx, ep, e.MaxPerTenant); err != nil {
		if errors.Is(err, store.ErrLimitReached) {
			return apperr.Errorf(apperr.ELimitReached,
				"the tenant has its limit of %d webhook endpoints; delete one before registering another", e.MaxPerTenant)
		}
		return err
	}
	return nil
}

// newEndpointID returns a fresh endpoint id: we_ and 32 hex digits.
func newEndpointID() string {
	return event.EndpointIDPrefix + strings.ReplaceAll(uuid.Must(uuid.NewV7()).String(), "-", "")
}

// validate checks a registration and returns the endpoint it makes, with id
// and a new secret. Errors: EInvalid naming each bad field.
func (e *Endpoints) validate(ctx context.Context, tenantID, rawURL string, types []event.Type, id string) (event.Endpoint, error) {
	var fe []apperr.FieldError
	u, err := url.Parse(rawURL)
	switch {
	case rawURL == "":
		fe = append(fe, apperr.FieldError{Field: "url", Reason: "is required"})
	case len(rawURL) > MaxURLLength:
		fe = append(fe, apperr.FieldError{Field: "url", Reason: fmt.Sprintf("must be at most %d bytes", MaxURLLength)})
	case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil || u.Fragment != "":
		fe = append(fe, apperr.FieldError{Field: "url", Reason: "must be an absolute http or https URL without user info or fragment"})
	default:
		if err := checkTarget(ctx, u, e.AllowPrivate); err != nil {
			reason := "must resolve to a public address"
			if e.AllowPrivateSetting != "" {
				reason += " (loopback and private targets are refused unless the server sets " + e.AllowPrivateSetting + ")"
			}
			if !errors.Is(err, ErrPrivateTarget) {
				reason = "host does not resolve"
			}
			fe = append(fe, apperr.FieldError{Field: "url", Reason: reason})
		}
	}
	if len(types) == 0 {
		fe = append(fe, apperr.FieldError{Field: "events", Reason: "must list at least one event type"})
	}
	for i, t := range types {
		if !t.Valid() {
			fe = append(fe, apperr.FieldError{Field: fmt.Sprintf("events[%d]", i),
				Reason: "must be one of " + strings.Join(typeNames(), ", ")})
		}
	}
	if len(fe) > 0 {
		return event.Endpoint{}, &apperr.Error{Code: apperr.EInvalid, Message: "the webhook endpoint has invalid fields", Fields: fe}
	}
	secret := make([]byte, 32)
	_, _ = rand.Read(secret)
	ep := event.Endpoint{
		ID:        id,
		TenantID:  tenantID,
		URL:       rawURL,
		Types:     slices.Compact(slices.Sorted(slices.Values(types))),
		Secret:    event.SecretPrefix + hex.EncodeToString(secret),
		Enabled:   true,
		CreatedAt: e.now().UTC().Truncate(time.Microsecond),
	}
	return ep, nil
}

func typeNames() []string {
	names := make([]string, len(event.Types))
	for i, t := range event.Types {
		names[i] = string(t)
	}
	return names
}

// notFound maps the store's ErrNotFound to an ENotFound naming what.
func notFound(err error, what, id string) error {
	if errors.Is(err, store.ErrNotFound) {
		return apperr.Errorf(apperr.ENotFound, "%s %s not found", what, id)
	}
	return err
}

// noEndpoint is the ENotFound of an id that is no endpoint id, quoted (%q)
// since it may hold any byte.
func noEndpoint(id string) error {
	return apperr.Errorf(apperr.ENotFound, "webhook endpoint %q not found", id)
}

// Get returns the tenant's endpoint id (without its secret). Errors:
// ENotFound (another tenant's endpoint too), EUnavailable.
func (e *Endpoints) Get(ctx context.Context, tenantID, id string) (event.Endpoint, error) {
	if !event.ValidEndpointID(id) {
		return event.Endpoint{}, noEndpoint(id)
	}
	ep, err := e.Store.GetEndpoint(ctx, tenantID, id)
	return ep, notFound(err, "webhook endpoint", id)
}

// List returns the tenant's endpoints, oldest first, without secrets.
func (e *Endpoints) List(ctx context.Context, tenantID string) ([]event.Endpoint, error) {
	return e.Store.ListEndpoints(ctx, tenantID)
}

// Delete deletes the tenant's endpoint id and its pending deliveries.
// Errors: ENotFound, EUnavailable.
func (e *Endpoints) Delete(ctx context.Context, tenantID, id string) error {
	if !event.ValidEndpointID(id) {
		return noEndpoint(id)
	}
	return notFound(e.Store.DeleteEndpoint(ctx, tenantID, id), "webhook endpoint", id)
}

// Deliveries returns the latest deliveries (at most limit) of the tenant's
// endpoint id, newest first. Errors: ENotFound, EUnavailable.
func (e *Endpoints) Deliveries(ctx context.Context, tenantID, id string, limit int) ([]event.Delivery, error) {
	if !event.ValidEndpointID(id) {
		return nil, noEndpoint(id)
	}
	ds, err := e.Store.ListDeliveries(ctx, tenantID, id, limit)
	return ds, notFound(err, "webhook endpoint", id)
}

// Events returns a page of the tenant's event feed (see
// store.EventStore.ListEvents). Errors: EInvalid (a bad cursor),
// EUnavailable.
func (e *Endpoints) Events(ctx context.Context, tenantID string, f event.Filter) ([]event.Stored, error) {
	return e.Store.ListEvents(ctx, tenantID, f)
}

// Event returns the tenant's event id. Errors: ENotFound (another tenant's
// event too), EUnavailable.
func (e *Endpoints) Event(ctx context.Context, tenantID, id string) (event.Stored, error) {
	if !event.ValidID(id) {
		return event.Stored{}, apperr.Errorf(apperr.ENotFound, "event %q not found", id)
	}
	ev, err := e.Store.GetEvent(ctx, tenantID, id)
	return ev, notFound(err, "event", id)
}
