package config

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/countersign/countersign/internal/ownerauth"
)

// validateInAgentPod refuses a ledger the agent could answer for itself.
//
// In the agent's pod (in-agent-pod) the agent shares this process's
// loopback and /etc/hosts, and the pod spec writes a line of that file
// the injector cannot refuse: the kubelet maps the pod's own host name
// (spec.hostname and subdomain, which StatefulSets set, or the pod's name)
// to the pod's own address. A ledger name that resolves there, or a
// loopback address, reaches whatever the agent listens on: a fake Postgres
// that answers every decision. Only TLS that checks the server's
// certificate against the host name (sslmode=verify-full) keeps an
// impostor out, whatever a name resolves to.
//
// The URL is parsed by pgconn, which the ledger's pool uses too, so what is
// checked is what would be dialled: its sslmode, PGSSLMODE and the other
// PG* variables, sslrootcert=system (which means verify-full), and every
// host of a libpq host list (each one is a name the agent can steer). Each
// host must be TCP, not loopback, and reached with verify-full alone.
func (c Config) validateInAgentPod() error {
	if c.DatabaseURL == "" {
		return nil // ValidateDatabase says it is required
	}
	name := fmt.Sprintf("database-url (%s) with %s (%s)", EnvName("database-url"), InAgentPodFlag, EnvName(InAgentPodFlag))
	pc, err := pgconn.ParseConfig(c.DatabaseURL)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	const why = "the agent shares this pod's loopback and /etc/hosts, so a ledger it steers to itself would decide its own payments"
	var errs []error
	for _, h := range ledgerHosts(pc) {
		addr := net.JoinHostPort(h.host, strconv.Itoa(int(h.port)))
		switch {
		case strings.HasPrefix(h.host, "/"):
			errs = append(errs, fmt.Errorf("%s: host %s is a Unix socket, over which no TLS is used: name a TCP host reached with sslmode=verify-full", name, h.host))
		case loopbackHost(h.host):
			errs = append(errs, fmt.Errorf("%s: host %s is a loopback address: %s; name the ledger's own host, with sslmode=verify-full", name, addr, why))
		default:
			if mode := sslMode(h.tls); mode != "verify-full" {
				errs = append(errs, fmt.Errorf("%s: host %s is reached with %s: %s; set sslmode=verify-full (in the URL, or PGSSLMODE) "+
					"so that only a server with a certificate for that host name is the ledger", name, addr, mode, why))
			}
		}
	}
	return errors.Join(errs...)
}

// validateConsoleInAgentPod refuses, in the agent's pod, console issuer
// endpoints over plain http, which checkEndpoint allows to loopback
// elsewhere: the agent shares this pod's loopback and could answer them.
// owner-issuer and owner-jwks-url are checked by OwnerAuth().Validate,
// which is given InAgentPod.
func (c Config) validateConsoleInAgentPod() error {
	var errs []error
	for _, f := range []struct{ flag, v string }{{"owner-authorization-url", c.OwnerAuthorizationURL}, {"owner-token-url", c.OwnerTokenURL}} {
		if f.v == "" {
			continue
		}
		if err := ownerauth.CheckInAgentPodURL(f.flag, f.v); err != nil {
			errs = append(errs, fmt.Errorf("%w (%s, with %s)", err, EnvName(f.flag), InAgentPodFlag))
		}
	}
	return errors.Join(errs...)
}

// ledgerHost is one host of a ledger URL with the TLS configurations pgconn
// tries it with, in order (nil: no TLS).
type ledgerHost struct {
	host string
	port uint16
	tls  []*tls.Config
}

// ledgerHosts groups the attempts of a parsed URL by host: pgconn lists one
// attempt per host and TLS setting (sslmode prefer and allow try a host
// twice), the first in the Config itself and the rest as Fallbacks.
func ledgerHosts(pc *pgconn.Config) []ledgerHost {
	attempts := append([]*pgconn.FallbackConfig{{Host: pc.Host, Port: pc.Port, TLSConfig: pc.TLSConfig}}, pc.Fallbacks...)
	var out []ledgerHost
	for _, a := range attempts {
		if n := len(out); n > 0 && out[n-1].host == a.Host && out[n-1].port == a.Port {
			out[n-1].tls = append(out[n-1].tls, a.TLSConfig)
			continue
		}
		out = append(out, ledgerHost{host: a.Host, port: a.Port, tls: []*tls.Config{a.TLSConfig}})
	}
	return out
}

// sslMode names, from the TLS configurations pgconn made for one host, the
// libpq sslmode that makes them (pgconn's configTLS): verify-full is one
// configuration that verifies the certificate and its host name.
func sslMode(attempts []*tls.Config) string {
	switch {
	case len(attempts) == 2 && attempts[0] == nil:
		return "sslmode=allow (no TLS first)"
	case len(attempts) == 2:
		return "sslmode=prefer (the default when none is set), which falls back to no TLS"
	case len(attempts) != 1:
		return fmt.Sprintf("%d connection attempts", len(attempts))
	case attempts[0] == nil:
		return "sslmode=disable (no TLS)"
	case !attempts[0].InsecureSkipVerify:
		return "verify-full"
	case attempts[0].VerifyPeerCertificate != nil:
		return "sslmode=verify-ca (or require with sslrootcert), which checks the certificate's issuer but not that it names the host"
	}
	return "sslmode=require, which checks no certificate"
}

// loopbackHost: localhost, a loopback address, or the unspecified address
// (a connection to 0.0.0.0 or :: reaches this host's own listeners).
func loopbackHost(host string) bool {
	h := strings.TrimSuffix(strings.ToLower(host), ".")
	if h == "localhost" || strings.HasSuffix(h, ".localhost") {
		return true
	}
	ip, err := netip.ParseAddr(strings.Trim(h, "[]"))
	if err != nil {
		return false
	}
	ip = ip.Unmap()
	return ip.IsLoopback() || ip.IsUnspecified()
}
