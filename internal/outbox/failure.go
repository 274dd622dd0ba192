package outbox

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/url"
	"strings"
	"syscall"
	"time"
)

// What the owner is told (in last_error, read through GetDelivery and the
// dead letters) when a request got no answer: a fixed class, never the
// error's own text. That text can carry what the webhook's host name
// resolved to, the resolver's address, or the names in an internal
// server's certificate, and an owner chooses the host: with it, Countersign
// would be the owner's oracle into the operator's network (found by a
// review). The operator's log has the details.
const (
	failRefused     = "address refused: the webhook's host is, or resolves to, an address webhooks may not reach (the operator may allow a network with --webhook-allow-networks)"
	failDNS         = "DNS failure: the webhook's host name did not resolve"
	failConnRefused = "connection refused"
	failUnreachable = "host or network unreachable"
	failReset       = "connection reset or closed before an answer"
	failTLS         = "TLS error: no secure connection to the webhook's host (certificate or handshake)"
	failHeaders     = "response headers too large (the most read is 16 KiB)"
	failProtocol    = "no valid HTTP answer (malformed, or beyond a limit such as 16 KiB of headers)"
	failNetwork     = "network error"
)

// describe says why a request got no answer: the class the owner is
// told, and the detail for the operator's log (without the request's URL,
// which may carry a token the owner put in it).
func describe(err error, timeout time.Duration) (owner, detail string) {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	return class(err, timeout), err.Error()
}

func class(err error, timeout time.Duration) string {
	var (
		dns  *net.DNSError
		ne   net.Error
		rec  tls.RecordHeaderError
		alrt tls.AlertError
		cver *tls.CertificateVerificationError
		unk  x509.UnknownAuthorityError
		host x509.HostnameError
		inv  x509.CertificateInvalidError
	)
	msg := err.Error()
	switch {
	case errors.Is(err, ErrAddressRefused):
		return failRefused
	case errors.As(err, &dns):
		return failDNS
	case errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()):
		return "no answer within " + timeout.String()
	case errors.Is(err, syscall.ECONNREFUSED):
		return failConnRefused
	case errors.Is(err, syscall.ENETUNREACH) || errors.Is(err, syscall.EHOSTUNREACH):
		return failUnreachable
	case errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		return failReset
	case errors.As(err, &rec) || errors.As(err, &alrt) || errors.As(err, &cver) || errors.As(err, &unk) ||
		errors.As(err, &host) || errors.As(err, &inv) ||
		strings.HasPrefix(msg, "tls: ") || strings.HasPrefix(msg, "x509: "):
		return failTLS
	// net/http names no error for these. Over HTTP/2, headers far
	// beyond the limit end the connection instead (COMPRESSION_ERROR,
	// PROTOCOL_ERROR): failProtocol.
	case strings.Contains(msg, "response headers exceeded") || strings.Contains(msg, "header list larger than"):
		return failHeaders
	}
	var op *net.OpError
	if errors.As(err, &op) {
		return failNetwork
	}
	return failProtocol
}
