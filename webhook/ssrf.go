package webhook

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"syscall"
)

// ErrPrivateTarget is returned (wrapped) when a webhook target is, or
// resolves to, an address a public deployment must not reach: loopback,
// private (RFC 1918, RFC 4193), shared (RFC 6598), link-local, unspecified
// or multicast.
var ErrPrivateTarget = errors.New("webhook: target address is private, loopback or link-local")

var sharedSpace = netip.MustParsePrefix("100.64.0.0/10") // RFC 6598 carrier-grade NAT

// publicAddr reports whether ip may be a webhook target.
func publicAddr(ip netip.Addr) bool {
	ip = ip.Unmap()
	return ip.IsValid() && !ip.IsLoopback() && !ip.IsPrivate() && !ip.IsLinkLocalUnicast() &&
		!ip.IsLinkLocalMulticast() && !ip.IsInterfaceLocalMulticast() && !ip.IsMulticast() &&
		!ip.IsUnspecified() && !sharedSpace.Contains(ip) && !(ip.Is4() && ip.As4()[0] == 0)
}

// checkDial is a net.Dialer Control function: it refuses a connection to
// an address that is not public, after name resolution, so the check sees
// the address actually dialled.
func checkDial(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("%w: %s", ErrPrivateTarget, address)
	}
	if !publicAddr(ap.Addr()) {
		return fmt.Errorf("%w: %s", ErrPrivateTarget, ap.Addr())
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
