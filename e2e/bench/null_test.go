package bench

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// The protocol floor: Envoy's two exchanges of an ALLOW (the ext_authz
// Check, then the ext_proc stream around the rail call) answered by a
// server that decides nothing, reads nothing and writes nothing, driven by
// the same load generator over the same kind of Unix socket. It is what
// this machine can do before any gate, rail read or ledger write: the
// ceiling an ALLOW's throughput is measured under, beside pgbench's.
//
// It runs as a process of its own (this test binary, started again with
// nullSocketEnv set), as `countersign serve` does, so that the cores are
// shared the same way.

const nullSocketEnv = "COUNTERSIGN_BENCH_NULL_SOCKET"

func TestMain(m *testing.M) {
	if sock := os.Getenv(nullSocketEnv); sock != "" {
		os.Exit(serveNull(sock))
	}
	os.Exit(m.Run())
}

// serveNull serves the null ext_authz and ext_proc on sock until SIGTERM.
func serveNull(sock string) int {
	lis, err := net.Listen("unix", sock)
	if err != nil {
		_, _ = os.Stderr.WriteString("null server: " + err.Error() + "\n")
		return 1
	}
	s := grpc.NewServer()
	authv3.RegisterAuthorizationServer(s, nullServer{})
	extprocv3.RegisterExternalProcessorServer(s, nullServer{})
	healthpb.RegisterHealthServer(s, health.NewServer())
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, os.Interrupt)
	go func() { <-stop; s.Stop() }()
	if err := s.Serve(lis); err != nil {
		_, _ = os.Stderr.WriteString("null server: " + err.Error() + "\n")
		return 1
	}
	return 0
}

type nullServer struct {
	authv3.UnimplementedAuthorizationServer
	extprocv3.UnimplementedExternalProcessorServer
}

// Check allows everything, setting one header, as an ALLOW does.
func (nullServer) Check(context.Context, *authv3.CheckRequest) (*authv3.CheckResponse, error) {
	return &authv3.CheckResponse{Status: &status.Status{}, HttpResponse: &authv3.CheckResponse_OkResponse{OkResponse: &authv3.OkHttpResponse{
		Headers: []*corev3.HeaderValueOption{{Header: &corev3.HeaderValue{Key: "idempotency-key", RawValue: []byte("NULL")}}},
	}}}, nil
}

// Process answers each phase at once; the request body gets a stamp, as
// Countersign's does, so the load generator's checks hold.
func (nullServer) Process(st extprocv3.ExternalProcessor_ProcessServer) error {
	for {
		req, err := st.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		var resp *extprocv3.ProcessingResponse
		switch r := req.GetRequest().(type) {
		case *extprocv3.ProcessingRequest_RequestHeaders:
			resp = &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestHeaders{RequestHeaders: &extprocv3.HeadersResponse{}}}
		case *extprocv3.ProcessingRequest_RequestBody:
			body := append(append([]byte{}, r.RequestBody.GetBody()...), "&"+stampMember+"=NULL"...)
			resp = &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{RequestBody: &extprocv3.BodyResponse{
				Response: &extprocv3.CommonResponse{BodyMutation: &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_Body{Body: body}}}}}}
		case *extprocv3.ProcessingRequest_ResponseHeaders:
			resp = &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseHeaders{ResponseHeaders: &extprocv3.HeadersResponse{}}}
		default:
			resp = &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{ResponseBody: &extprocv3.BodyResponse{}}}
		}
		if err := st.Send(resp); err != nil {
			return err
		}
	}
}

// null starts the null server and returns it as a serveProc whose Envoy
// connections reach it.
func (r *rig) null() *serveProc {
	t := r.t
	t.Helper()
	sockDir, err := os.MkdirTemp(r.dir, "null-")
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(sockDir, "null.sock")
	p := &serveProc{out: newLogFile(t, r.dir), done: make(chan struct{}), envoy: "unix://" + sock}
	p.cmd = exec.Command(os.Args[0], "-test.run=^$")
	p.cmd.Env = append(os.Environ(), nullSocketEnv+"="+sock)
	p.cmd.Stdout, p.cmd.Stderr = p.out.f, p.out.f
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() { p.stop() })
	for range 2 { // two connections, as to countersign serve
		c, err := grpc.NewClient(p.envoy, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		p.envoyConns = append(p.envoyConns, c)
		p.conns = append(p.conns, c)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := healthpb.NewHealthClient(p.envoyConns[0]).Check(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true)); err != nil {
		t.Fatalf("the null server did not come up: %v\n%s", err, p.out.String())
	}
	return p
}
