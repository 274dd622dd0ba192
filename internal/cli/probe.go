package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/countersign/countersign/internal/config"
)

// defaultProbeTimeout leaves room inside a kubelet probe's timeoutSeconds
// of 2 for the process to start and exit.
const defaultProbeTimeout = 1500 * time.Millisecond

// newProbe is `countersign probe`, the kubelet's exec probe of the
// countersign container: grpc.health.v1 over the API listener, which in
// the injected and the chart's pods is a Unix socket on a volume the agent
// cannot mount. The HTTP listener's /healthz and /readyz are reachable by
// the agent, which could hold every one of its connections so that the
// kubelet's probes failed and Countersign restarted in a loop (found by a
// review).
func newProbe() *cobra.Command {
	var (
		server  string
		ready   bool
		timeout time.Duration
	)
	grpcAddrEnv := config.EnvName("grpc-addr")
	cmd := &cobra.Command{
		Use:   "probe",
		Short: "Check that a countersign serve beside this process answers (or, with --ready, is ready), over grpc.health.v1",
		Long: "Probe calls grpc.health.v1 Health/Check (service \"\") on a running `countersign serve`: on --server, else on " +
			grpcAddrEnv + " (the address serve listens on; a wildcard host is probed on loopback). It exits 0 if the " +
			"server answers at all (liveness: the process serves), or with --ready only if it answers SERVING (the ledger " +
			"answers and its schema is current). Only a Unix socket or a loopback address is probed: this is the kubelet's " +
			"exec probe of the process beside it, not a remote check. It sends no credential.",
		Example: "  countersign probe --ready --server unix:/var/run/countersign/api.sock",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			name, addr := "--server", server
			if addr == "" {
				name, addr = grpcAddrEnv, os.Getenv(grpcAddrEnv)
			}
			if addr == "" {
				return fmt.Errorf("say which server to probe: --server unix:/path (or 127.0.0.1:port), or set %s as for serve", grpcAddrEnv)
			}
			if timeout <= 0 || timeout > time.Minute {
				return fmt.Errorf("--timeout must be more than 0 and at most 1m, got %s", timeout)
			}
			line, err := probe(cmd.Context(), name, addr, ready, timeout)
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), line)
			return nil
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&server, "server", "", "gRPC address of the countersign to probe (unix:/path or a loopback host:port); default $"+grpcAddrEnv)
	fs.BoolVar(&ready, "ready", false, "succeed only if it is SERVING (readiness), not merely answering (liveness)")
	fs.DurationVar(&timeout, "timeout", defaultProbeTimeout, "how long to wait for the answer")
	return cmd
}

// probe checks the server at addr (named by name in errors) and returns
// the line to print on success.
func probe(ctx context.Context, name, addr string, ready bool, timeout time.Duration) (string, error) {
	target, local, err := addressTarget(name, listenToDial(addr))
	if err != nil {
		return "", err
	}
	if !local {
		return "", fmt.Errorf("refusing to probe %s %q: it is neither a unix socket nor a loopback address (127.0.0.0/8, ::1, localhost); "+
			"probe checks the countersign beside it", name, addr)
	}
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return "", fmt.Errorf("probe %s: %w", addr, err)
	}
	defer func() { _ = conn.Close() }()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		return "", probeError(addr, timeout, err)
	}
	st := resp.GetStatus()
	switch {
	case !ready:
		return fmt.Sprintf("live: %s answers (%s)", addr, st), nil
	case st == healthpb.HealthCheckResponse_SERVING:
		return fmt.Sprintf("ready: %s is SERVING", addr), nil
	default:
		return "", fmt.Errorf("not ready: %s answers %s (the ledger is unreachable, its schema is behind, or serve is starting "+
			"or shutting down; its log says which)", addr, st)
	}
}

// probeError says why no health answer came.
func probeError(addr string, timeout time.Duration, err error) error {
	s := status.Convert(err)
	switch {
	case s.Code() == codes.DeadlineExceeded || errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("not live: no answer from %s within %s", addr, timeout)
	case s.Code() == codes.Unavailable:
		return fmt.Errorf("not live: cannot reach %s: %s", addr, s.Message())
	default:
		return fmt.Errorf("not live: %s answered grpc.health.v1 Check with %s: %s", addr, s.Code(), s.Message())
	}
}

// listenToDial turns an address serve listens on into one to dial: a
// wildcard host (none, 0.0.0.0, ::) listens on loopback too.
func listenToDial(addr string) string {
	if _, unix := config.UnixPath(addr); unix {
		return addr
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr // addressTarget says what is wrong
	}
	switch host {
	case "", "0.0.0.0":
		return net.JoinHostPort("127.0.0.1", port)
	case "::":
		return net.JoinHostPort("::1", port)
	}
	return addr
}
