// Command mockrail runs the stateful, fault-injecting test rail
// (internal/testing/mockrail) on a real listener for whole-process tests:
//
//	mockrail --listen 127.0.0.1:12111 --seed-file seed.json --fault replica_lag:delay=3s
//
// Every flag can also be set through the environment (MOCKRAIL_LISTEN,
// MOCKRAIL_SEED_FILE, MOCKRAIL_FAULT with rules separated by ";",
// MOCKRAIL_IDEMPOTENCY_TTL, MOCKRAIL_SHUTDOWN_TIMEOUT, MOCKRAIL_LOG_LEVEL);
// a flag wins over its variable. On start it prints one line,
// "mockrail listening on http://ADDR", to stdout; logs go to stderr as JSON.
// SIGINT or SIGTERM shuts it down gracefully: requests hung by
// timeout_after_apply are cut off, the others finish.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/countersign/countersign/internal/testing/mockrail"
)

func main() {
	os.Exit(realMain(os.Args[1:], os.Getenv, os.Stdout, os.Stderr))
}

// realMain runs mockrail until SIGINT or SIGTERM and returns the exit code.
func realMain(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg, err := parseConfig(args, getenv, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "mockrail:", err)
		return 2
	}
	if err := run(ctx, cfg, stdout, stderr); err != nil {
		fmt.Fprintln(stderr, "mockrail:", err)
		return 1
	}
	return 0
}

type config struct {
	Listen          string
	SeedFile        string
	Faults          []mockrail.Fault
	IdempotencyTTL  time.Duration
	ShutdownTimeout time.Duration
	LogLevel        slog.Level
}

type faultFlag []mockrail.Fault

func (f *faultFlag) String() string { return fmt.Sprint(len(*f), " rules") }

func (f *faultFlag) Set(s string) error {
	rule, err := mockrail.ParseFault(s)
	if err != nil {
		return err
	}
	*f = append(*f, rule)
	return nil
}

// parseConfig reads flags, then MOCKRAIL_* variables for the flags not given,
// then defaults.
func parseConfig(args []string, getenv func(string) string, stderr io.Writer) (config, error) {
	fs := flag.NewFlagSet("mockrail", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "127.0.0.1:12111", "address to listen on (port 0 picks a free port) [MOCKRAIL_LISTEN]")
	seed := fs.String("seed-file", "", "JSON seed file with accounts, payments and faults [MOCKRAIL_SEED_FILE]")
	var faults faultFlag
	fs.Var(&faults, "fault", "fault rule PROFILE[:count=N,delay=D,rail=R,method=M,path=P]; repeatable [MOCKRAIL_FAULT, rules separated by ;]")
	ttl := fs.Duration("idempotency-ttl", mockrail.DefaultIdempotencyTTL, "how long idempotent responses are kept [MOCKRAIL_IDEMPOTENCY_TTL]")
	shutdown := fs.Duration("shutdown-timeout", 10*time.Second, "how long to wait for requests on shutdown [MOCKRAIL_SHUTDOWN_TIMEOUT]")
	logLevel := fs.String("log-level", "info", "debug (one line per request), info, warn or error [MOCKRAIL_LOG_LEVEL]")
	if err := fs.Parse(args); err != nil {
		return config{}, err
	}
	if fs.NArg() > 0 {
		return config{}, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	env := func(name, variable string) (string, bool) {
		if given[name] {
			return "", false
		}
		v := getenv(variable)
		return v, v != ""
	}
	if v, ok := env("listen", "MOCKRAIL_LISTEN"); ok {
		*listen = v
	}
	if v, ok := env("seed-file", "MOCKRAIL_SEED_FILE"); ok {
		*seed = v
	}
	if v, ok := env("fault", "MOCKRAIL_FAULT"); ok {
		rules, err := mockrail.ParseFaults(v)
		if err != nil {
			return config{}, fmt.Errorf("MOCKRAIL_FAULT: %w", err)
		}
		faults = rules
	}
	for _, d := range []struct {
		name, variable string
		dst            *time.Duration
	}{
		{"idempotency-ttl", "MOCKRAIL_IDEMPOTENCY_TTL", ttl},
		{"shutdown-timeout", "MOCKRAIL_SHUTDOWN_TIMEOUT", shutdown},
	} {
		if v, ok := env(d.name, d.variable); ok {
			p, err := time.ParseDuration(v)
			if err != nil {
				return config{}, fmt.Errorf("%s: %w", d.variable, err)
			}
			*d.dst = p
		}
	}
	if v, ok := env("log-level", "MOCKRAIL_LOG_LEVEL"); ok {
		*logLevel = v
	}
	cfg := config{Listen: *listen, SeedFile: *seed, Faults: faults, IdempotencyTTL: *ttl, ShutdownTimeout: *shutdown}
	if err := cfg.LogLevel.UnmarshalText([]byte(*logLevel)); err != nil {
		return config{}, fmt.Errorf("log level %q: want debug, info, warn or error", *logLevel)
	}
	return cfg, cfg.validate()
}

func (c config) validate() error {
	if c.Listen == "" {
		return errors.New("listen address is empty")
	}
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		return fmt.Errorf("listen address %q: %w", c.Listen, err)
	}
	if c.IdempotencyTTL <= 0 {
		return fmt.Errorf("idempotency TTL must be positive, got %s", c.IdempotencyTTL)
	}
	if c.ShutdownTimeout <= 0 {
		return fmt.Errorf("shutdown timeout must be positive, got %s", c.ShutdownTimeout)
	}
	return nil
}

// run serves until ctx ends, then shuts down gracefully.
func run(ctx context.Context, cfg config, stdout, stderr io.Writer) error {
	logger := slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: cfg.LogLevel}))
	opts := []mockrail.Option{mockrail.WithLogger(logger), mockrail.WithIdempotencyTTL(cfg.IdempotencyTTL)}
	if cfg.SeedFile != "" {
		seed, err := mockrail.LoadSeed(cfg.SeedFile)
		if err != nil {
			return err
		}
		opts = append(opts, mockrail.WithSeed(seed))
	}
	opts = append(opts, mockrail.WithFaults(cfg.Faults...))
	rail, err := mockrail.New(opts...)
	if err != nil {
		return err
	}
	defer rail.Close()
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", cfg.Listen)
	if err != nil {
		return err
	}
	srv := &http.Server{
		Handler:           rail,
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()

	var names []string
	for _, a := range rail.Accounts() {
		names = append(names, a.Name+"("+string(a.Rail)+")")
	}
	fmt.Fprintf(stdout, "mockrail listening on http://%s\n", ln.Addr())
	logger.Info("mockrail started", "addr", ln.Addr().String(), "accounts", strings.Join(names, ","),
		"payments", len(rail.Payments()), "faults", len(rail.Faults()))

	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	logger.Info("mockrail shutting down")
	rail.Close() // cut off requests hung by timeout_after_apply
	sctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		_ = srv.Close()
		if serr := <-served; !errors.Is(serr, http.ErrServerClosed) {
			return errors.Join(fmt.Errorf("shutdown: %w", err), serr)
		}
		return fmt.Errorf("shutdown: %w", err)
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	logger.Info("mockrail stopped")
	return nil
}
