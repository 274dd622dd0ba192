package cli

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
	"github.com/countersign/countersign/internal/config"
)

// The owner token approves held payments: whoever reads it can move the
// owner's money. These are the rules for where it goes and how: TLS when
// asked for, plaintext only to this machine (a unix socket or a loopback
// address) unless the owner says --insecure-plaintext (found by a review:
// the CLI sent it in clear to any TCP --server).

const insecurePlaintextFlag = "insecure-plaintext"

// ownerClient is the owner API of a running server, with the owner's token.
type ownerClient struct {
	conn   *grpc.ClientConn
	client countersignv1.OwnerServiceClient
	token  string
}

// ownerFlags are the flags of every owner command.
type ownerFlags struct {
	server            string
	token             string
	tokenFile         string
	tls               bool
	serverCA          string
	tlsServerName     string
	insecurePlaintext bool
	cmd               *cobra.Command // where the flags are bound: Changed, and the warning's stderr
}

func (f *ownerFlags) bind(cmd *cobra.Command) {
	f.cmd = cmd
	fs := cmd.PersistentFlags()
	fs.StringVar(&f.server, "server", "", "gRPC address of a running countersign (host:port or unix:/path); required")
	fs.StringVar(&f.token, "owner-token", "", "owner token (cso_…); default $COUNTERSIGN_OWNER_TOKEN")
	fs.StringVar(&f.tokenFile, "owner-token-file", "", "file holding the owner token (a trailing newline is ignored), instead of --owner-token; default $COUNTERSIGN_OWNER_TOKEN_FILE")
	fs.BoolVar(&f.tls, "tls", false, "reach --server over TLS, verifying its certificate against the system's roots (or --server-ca); default $COUNTERSIGN_TLS")
	fs.StringVar(&f.serverCA, "server-ca", "", "PEM CA bundle to verify --server's TLS certificate against instead of the system's roots (implies --tls); default $COUNTERSIGN_SERVER_CA")
	fs.StringVar(&f.tlsServerName, "tls-server-name", "", "name --server's TLS certificate must carry, when not --server's host (implies --tls); default $COUNTERSIGN_TLS_SERVER_NAME")
	fs.BoolVar(&f.insecurePlaintext, insecurePlaintextFlag, false, "DANGER: send the owner token without TLS to a TCP --server that is not loopback; "+
		"only where the path is encrypted otherwise (e.g. a mesh's mTLS)")
}

func (f *ownerFlags) dial() (*ownerClient, error) {
	token, err := f.ownerToken(os.LookupEnv)
	if err != nil {
		return nil, err
	}
	// No default: the owner token goes wherever this points, and in a pod
	// 127.0.0.1 is shared with the agent, which can listen on a port the
	// API left free (the chart and the injector put the API on a Unix
	// socket) and take the token (found by a review).
	if f.server == "" {
		return nil, errors.New("say where the owner API is: --server unix:/var/run/countersign/api.sock (in the chart's pods) or host:port; " +
			"there is no default, because the owner token goes to whatever listens there")
	}
	target, local, err := serverTarget(f.server)
	if err != nil {
		return nil, err
	}
	creds, err := f.transport(local, os.LookupEnv)
	if err != nil {
		return nil, err
	}
	if !local && f.insecurePlaintext && f.cmd != nil { // with TLS, transport refused the flag
		fmt.Fprintf(f.cmd.ErrOrStderr(), "countersign: warning: --%s: the owner token goes to %s without TLS\n", insecurePlaintextFlag, f.server)
	}
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(creds))
	if err != nil {
		return nil, err
	}
	return &ownerClient{conn: conn, client: countersignv1.NewOwnerServiceClient(conn), token: token}, nil
}

// open dials the server and returns the client, a context carrying the
// owner token with a deadline, and the function that releases both.
func (f *ownerFlags) open(parent context.Context) (*ownerClient, context.Context, func(), error) {
	c, err := f.dial()
	if err != nil {
		return nil, nil, nil, err
	}
	ctx, cancel := context.WithTimeout(parent, 30*time.Second)
	ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+c.token)
	return c, ctx, func() { cancel(); _ = c.conn.Close() }, nil
}

// ownerToken is the token from --owner-token or --owner-token-file, else
// from their environment variables; one source, never two.
func (f *ownerFlags) ownerToken(getenv func(string) (string, bool)) (string, error) {
	token, file := f.token, f.tokenFile
	tokenName, fileName := "--owner-token", "--owner-token-file"
	if token == "" && file == "" {
		token, _ = getenv(config.EnvName("owner-token"))
		file, _ = getenv(config.EnvName("owner-token-file"))
		tokenName, fileName = config.EnvName("owner-token"), config.EnvName("owner-token-file")
	}
	if token != "" && file != "" {
		return "", fmt.Errorf("both %s and %s are set: give the owner token one way", tokenName, fileName)
	}
	if file != "" {
		return readTokenFile(file)
	}
	if token == "" {
		return "", errors.New("an owner token is needed: --owner-token-file, --owner-token, COUNTERSIGN_OWNER_TOKEN_FILE or COUNTERSIGN_OWNER_TOKEN " +
			"(see `countersign owner bootstrap`)")
	}
	return token, nil
}

// readTokenFile reads a token file: the token, and at most the line ending
// an editor or `echo` leaves after it.
func readTokenFile(path string) (string, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("owner token file: %w", err)
	}
	token := strings.TrimSuffix(string(raw), "\n")
	token = strings.TrimSuffix(token, "\r")
	if token == "" {
		return "", fmt.Errorf("owner token file %s is empty", path)
	}
	if i := strings.IndexFunc(token, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }); i >= 0 {
		return "", fmt.Errorf("owner token file %s holds more than one token: a space, line break or control character at byte %d", path, i)
	}
	return token, nil
}

// serverTarget is the gRPC dial target of --server, and whether it is on
// this machine: a unix socket or a loopback host, where the token may go
// without TLS.
func serverTarget(server string) (target string, local bool, err error) {
	return addressTarget("--server", server)
}

// addressTarget is serverTarget for an address given by the setting name
// (a flag or a variable), which its errors name.
func addressTarget(name, server string) (target string, local bool, err error) {
	if p, ok := config.UnixPath(server); ok {
		if p == "" {
			return "", false, fmt.Errorf("%s %q names no socket path: unix:/path", name, server)
		}
		return "unix://" + p, true, nil
	}
	host, port, err := net.SplitHostPort(server)
	if n, perr := strconv.Atoi(port); err != nil || perr != nil || n < 1 || n > 65535 || strings.ContainsAny(host, "/@") {
		hint := ""
		if strings.Contains(server, "://") {
			hint = " (an address, not a URL: for TLS add --tls or --server-ca)"
		}
		return "", false, fmt.Errorf("%s %q must be host:port or unix:/path%s", name, server, hint)
	}
	if host == "" {
		return "", false, fmt.Errorf("%s %q names no host: say 127.0.0.1:%s for this machine", name, server, port)
	}
	// dns: explicitly, so that a host named like a gRPC scheme
	// (unix-abstract:…) cannot pick another transport than the one checked.
	return "dns:///" + server, isLoopbackHost(host), nil
}

// isLoopbackHost reports whether host is localhost or a loopback address
// (127.0.0.0/8, ::1).
func isLoopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}

// transport is the credentials of the connection: TLS when --tls,
// --server-ca or --tls-server-name (or their variables) ask for it, else
// plaintext, which is refused off this machine without --insecure-plaintext.
func (f *ownerFlags) transport(local bool, getenv func(string) (string, bool)) (credentials.TransportCredentials, error) {
	useTLS := f.tls
	if f.cmd == nil || !f.cmd.PersistentFlags().Changed("tls") {
		if v, ok := getenv(config.EnvName("tls")); ok && v != "" {
			b, err := strconv.ParseBool(v)
			if err != nil {
				return nil, fmt.Errorf("%s=%q is not true or false", config.EnvName("tls"), v)
			}
			useTLS = b
		}
	}
	orEnv := func(v, flag string) string {
		if v == "" {
			v, _ = getenv(config.EnvName(flag))
		}
		return v
	}
	ca, name := orEnv(f.serverCA, "server-ca"), orEnv(f.tlsServerName, "tls-server-name")
	if ca != "" || name != "" {
		useTLS = true
	}
	if useTLS {
		if f.insecurePlaintext {
			return nil, fmt.Errorf("--%s contradicts TLS (--tls, --server-ca or --tls-server-name, or their COUNTERSIGN_ variables): give one", insecurePlaintextFlag)
		}
		cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: name}
		if ca != "" {
			pool, err := loadCAs(ca)
			if err != nil {
				return nil, err
			}
			cfg.RootCAs = pool
		}
		return credentials.NewTLS(cfg), nil
	}
	if !local && !f.insecurePlaintext {
		return nil, fmt.Errorf("refusing to send the owner token in plaintext to %s: it is neither a loopback address (127.0.0.0/8, ::1, localhost) "+
			"nor a unix socket, and whoever reads the token on the way can approve payments with it. Use TLS (--tls, or --server-ca FILE "+
			"for a private CA; Countersign's own API listener has no TLS, so reach it through a TLS-terminating proxy, or a port-forward "+
			"to 127.0.0.1), or pass --%s where the path is encrypted otherwise", f.server, insecurePlaintextFlag)
	}
	return insecure.NewCredentials(), nil
}

// loadCAs reads a PEM bundle of CA certificates.
func loadCAs(path string) (*x509.CertPool, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("server-ca: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(raw) {
		return nil, fmt.Errorf("server-ca %s holds no PEM certificate", path)
	}
	return pool, nil
}
