// Package event holds Orderly's outgoing events: the closed set of event
// types, the event a state change of an order produces, webhook endpoints
// and deliveries, and the webhook signature scheme.
//
// # The outbox
//
// Every state change of an order writes its event in the same database
// transaction as the change (the transactional outbox), so an event exists
// exactly when its change does. An event's Sequence is the order's version
// after the change: every change moves the version on by one, so the
// events of one order are numbered 1, 2, 3 … without gaps, and a unique
// (order, sequence) constraint in both stores forbids a second event for
// one change. No-ops and replays change nothing and write no event.
//
// # Signatures
//
// Webhook deliveries carry Orderly-Signature: t=<unix seconds>,v1=<hex
// HMAC-SHA256 of "<t>.<body>" with the endpoint's secret> — the scheme
// Stripe documents. Receivers check the signature in constant time and
// reject timestamps older than a tolerance, which stops replays of a
// captured request, and deduplicate on the event id (delivery is at least
// once).
//
// The package imports neither net/http nor any SQL driver.
package event
