// Package console is Orderly's web console for operators: server-rendered
// pages (html/template, embedded with embed.FS; no script at all, so no
// build step) over the operator use cases (service.Operations), served by
// orderd beside the operator API under Prefix on the admin listener.
//
// # Pages
//
// The overview (backlogs: unknown outcomes, keys for the completer,
// attempts needing attention, failed and pending webhook deliveries, the
// outbox's and the sweeper's lag), orders search (order id, idempotency
// key, provider object id, customer, state, tenant), an order's page with
// its timeline (events, provider attempts, deliveries, keys), the attempts
// needing attention with their actions (recheck; resolve with a finding
// and a note), webhook endpoints with their deliveries and actions
// (resend one, resend every failed one since a time, re-enable), failed
// deliveries, and the audit log. Money is shown in major units with its
// currency (order.MajorUnits, ISO 4217 minor units).
//
// # Security
//
// An operator logs in with the token of an operator credential (the ones
// of the operator API, operator.ParseCredentials), limited per client
// address as the API is (operator.Authenticator). The session is a cookie
// (HttpOnly, SameSite=Strict, Secure when the request came over TLS or
// with X-Forwarded-Proto: https, Path the console's) holding the
// operator's name, a hash of the token, an expiry and a nonce, signed
// with HMAC-SHA256 under a key derived from every configured token: every
// instance configured alike accepts it, and changing or removing a
// credential ends its sessions. Logging out revokes the nonce on this
// instance; the expiry (Config.SessionTTL) bounds it everywhere.
//
// Every form carries a CSRF token (an HMAC of the session's nonce),
// checked on every POST before anything else, and an Idempotency-Key
// generated when the form was rendered, so submitting a form twice
// replays the first answer. A POST whose Sec-Fetch-Site is cross-site is
// refused. A reader's pages have no action forms and a reader's POST is
// a 403. Every answer carries a Content-Security-Policy without inline
// script or style (default-src 'none'; the stylesheet from 'self';
// form-action 'self'; frame-ancestors 'none'), X-Frame-Options: DENY,
// nosniff, no-referrer and Cache-Control: no-store. No secret is
// rendered: endpoint secrets are never read, keys are shown by hash.
//
// # Behind a proxy
//
// Links, redirects and the cookie's path start with the base path: the
// configured Config.BasePath (ORDERD_OPERATOR_BASE_PATH), or else the
// proxy's X-Forwarded-Prefix when it is a clean path ("/ops"): a proxy
// that serves the console at https://host/ops/operator/ strips /ops and
// sends X-Forwarded-Prefix: /ops and X-Forwarded-Proto: https.
package console
