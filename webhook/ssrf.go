package webhook

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"os"
	"syscall"

	"code.dny.dev/ssrf"
)

// ErrPrivateTarget is returned (wrapped) when a webhook target is, or
// resolves to, an address that is not global unicast: anything in the IANA
// IPv4 and IPv6 special-purpose address registries (loopback, private,
// shared, link-local, documentation, benchmarking, reserved, multicast,
// broadcast, the IETF protocol assignments), and in IPv6 anything outside
// 2000::/3 (IPv4-mapped and IPv4-compatible forms, NAT64) or inside its
// special-purpose prefixes (6to4, Teredo).
var ErrPrivateTarget = errors.New("webhook: target address is not a global unicast address")

// guardian decides which addresses a webhook may reach. It is
// code.dny.dev/ssrf's, whose prefix lists are generated from the IANA
// special-purpose registries (RFC 6890) and that allows in IPv6 only the
// global unicast range: a maintained list instead of our own. Any port is
// allowed (a receiver may listen on 8443); only TCP is.
var guardian = ssrf.New(ssrf.WithAnyPort())

// publicAddr reports whether ip may be a webhook target.
func publicAddr(ip netip.Addr) bool {
	return ip.IsValid() && guardian.SafeAddr(ip) == nil
}

// checkDial is a net.Dialer Control function: it refuses a connection to
// an address that is not global unicast, after name resolution, so the
// check sees the address actually dialled (a name that resolved to a
// public address at registration and to a private one now, DNS
// rebinding, is refused here).
func checkDial(network, address string, c syscall.RawConn) error {
	if err := guardian.Safe(network, address, c); err != nil {
		return fmt.Errorf("%w: %w", ErrPrivateTarget, err)
	}
	return nil
}

// checkTarget resolves u's host and refuses it if any address is not
// public (unless allowPrivate).
func checkTarget(ctx context.Context, u *url.URL, allowPrivate bool) error {
	if allowPrivate {
		return nil
	}
	host := u.Hostname()
	if ip, err := netip.ParseAddr(host); err == nil {
		if !publicAddr(ip) {
			return ErrPrivateTarget
		}
		return nil
	}
	ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return fmt.Errorf("webhook: cannot resolve %s: %w", host, err)
	}
	for _, ip := range ips {
		if !publicAddr(ip) {
			return ErrPrivateTarget
		}
	}
	return nil
}

// describeSendError is what a delivery's last_error says about a failed
// attempt: a fixed sentence per kind of failure, never the error's text,
// which names the address the endpoint's host resolved to (and the
// resolver's), an oracle on the deployment's internal DNS for whoever
// registered the endpoint. The full error goes to the log only.
func describeSendError(err error) string {
	var (
		dnsErr  *net.DNSError
		certErr *tls.CertificateVerificationError
		hostErr x509.HostnameError
		unkErr  x509.UnknownAuthorityError
		recErr  tls.RecordHeaderError
	)
	switch {
	case errors.Is(err, ErrPrivateTarget):
		return "refused before connecting: the endpoint's host resolves to an address that is not global unicast"
	case errors.As(err, &dnsErr):
		if dnsErr.IsNotFound {
			return "the endpoint's host name does not resolve"
		}
		return "the endpoint's host name could not be resolved"
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded):
		return "no answer within the delivery timeout"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "the connection was refused"
	case errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE):
		return "the connection was reset"
	case errors.Is(err, syscall.EHOSTUNREACH) || errors.Is(err, syscall.ENETUNREACH):
		return "the endpoint's host is unreachable"
	case errors.As(err, &certErr) || errors.As(err, &hostErr) || errors.As(err, &unkErr):
		return "the endpoint's TLS certificate does not verify"
	case errors.As(err, &recErr):
		return "the TLS handshake failed"
	case errors.Is(err, context.Canceled):
		return "the attempt was cancelled (shutdown)"
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return "no answer within the delivery timeout"
	}
	return "the request failed before an answer came"
}
