package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Prepare builds the template database: it receives the URL of an empty database and
// migrates it. It must close its connections before returning.
type Prepare func(ctx context.Context, databaseURL string) error

const (
	setupTimeout    = 5 * time.Minute
	teardownTimeout = time.Minute
	databaseTimeout = time.Minute
	maxNameLen      = 63 // NAMEDATALEN-1: longer identifiers are silently truncated
)

// active is the template environment of this test binary, set by Main.
var active atomic.Pointer[env]

// Main is for TestMain: it starts one throwaway cluster for the test binary (or uses
// DATABASE_URL / COUNTERSIGN_TEST_DATABASE_URL when set — COUNTERSIGN_TEST_DATABASE_URL
// wins), builds a template database with prepare (nil: an empty template), runs m.Run(),
// stops and removes everything it started, and exits with m.Run's code.
//
// m is usually the *testing.M itself; a wrapper that runs it (to clean up after it, say)
// works too.
func Main(m TestingM, prepare Prepare) {
	os.Exit(run(m, prepare, os.Getenv))
}

// TestingM is what Main and Wrap run: a *testing.M, or something wrapping one.
type TestingM interface{ Run() int }

// Wrap is Main without the exit, for a TestMain that hands m to another wrapper, such as
// goleak's:
//
//	func TestMain(m *testing.M) { goleak.VerifyTestMain(pgtest.Wrap(m, migrate)) }
//
// Its Run sets up as Main does, runs m.Run and tears down, so the leak check runs after
// the server and its goroutine are gone.
func Wrap(m TestingM, prepare Prepare) TestingM {
	return runFunc(func() int { return run(m, prepare, os.Getenv) })
}

type runFunc func() int

func (f runFunc) Run() int { return f() }

// run is Main without the exit.
func run(m TestingM, prepare Prepare, getenv func(string) string) (code int) {
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	e, err := newEnv(ctx, prepare, getenv)
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	active.Store(e)
	// Deferred, so a panic on the main goroutine still stops the server and drops what
	// was created. (A panic in a test goroutine kills the process before defers run;
	// then the kernel's parent-death signal stops the server and the next run sweeps
	// the directory.)
	defer func() {
		active.Store(nil)
		ctx, cancel := context.WithTimeout(context.Background(), teardownTimeout)
		defer cancel()
		if err := e.close(ctx); err != nil {
			fmt.Fprintf(os.Stderr, "pgtest: teardown: %v\n", err)
			if code == 0 {
				code = 1
			}
		}
	}()
	return m.Run()
}

// NewDatabase returns the URL of a fresh database cloned from the template built by
// Main's prepare, dropped in t.Cleanup. Safe for parallel tests.
func NewDatabase(t testing.TB) string {
	t.Helper()
	e := active.Load()
	if e == nil {
		t.Fatal("pgtest.NewDatabase: no template database: call pgtest.Main(m, prepare) from TestMain")
	}
	return e.newDatabase(t)
}

// env is a server with a template database on it, and the clones made from it.
type env struct {
	admin    *url.URL // connects to a database we only issue CREATE/DROP DATABASE from
	source   string   // where the server came from, for messages
	template string
	cluster  *Cluster // the server pgtest started; nil for an external server
	token    string   // distinguishes this process's databases on a shared server
	seq      atomic.Uint64

	mu     sync.Mutex
	clones map[string]struct{} // created and not yet dropped
}

func newEnv(ctx context.Context, prepare Prepare, getenv func(string) string) (_ *env, err error) {
	e := &env{token: randomToken(), clones: map[string]struct{}{}}
	e.template = "pgtest_template_" + e.token
	var raw string
	for _, name := range []string{"COUNTERSIGN_TEST_DATABASE_URL", "DATABASE_URL"} {
		if raw = getenv(name); raw != "" {
			e.source = name
			break
		}
	}
	if raw != "" {
		u, err := url.Parse(raw)
		if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") || u.Host == "" {
			return nil, fmt.Errorf("pgtest: %s must be a postgres://user@host:port/database URL", e.source)
		}
		e.admin = u
		e.source += " (" + u.Redacted() + ")"
	} else {
		c, err := StartCluster(ctx, ClusterOptions{})
		if err != nil {
			return nil, err
		}
		e.cluster = c
		e.admin, _ = url.Parse(c.URL("postgres"))
		e.source = "the pgtest cluster on port " + strconv.Itoa(c.Port())
	}
	ok := false
	defer func() { // also when prepare panics
		if !ok {
			err = errors.Join(err, e.close(context.Background()))
		}
	}()

	// template0 is the one database guaranteed pristine on any server.
	if err := createDatabase(ctx, e.admin.String(), e.template, "template0"); err != nil {
		return nil, fmt.Errorf("pgtest: create template database on %s: %w", e.source, err)
	}
	if prepare != nil {
		if err := prepare(ctx, e.url(e.template)); err != nil {
			return nil, fmt.Errorf("pgtest: prepare template database: %w", err)
		}
	}
	// CREATE DATABASE … TEMPLATE fails while anyone is connected to the template, so
	// close it to new sessions and end any that prepare left open.
	err = execAdmin(ctx, e.admin.String(),
		"ALTER DATABASE "+quoteIdent(e.template)+" ALLOW_CONNECTIONS false",
		"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '"+e.template+"'")
	if err != nil {
		return nil, fmt.Errorf("pgtest: seal template database: %w", err)
	}
	ok = true
	return e, nil
}

// url is the admin URL pointed at database.
func (e *env) url(database string) string {
	u := *e.admin
	u.Path, u.RawPath = "/"+database, ""
	return u.String()
}

func (e *env) newDatabase(t testing.TB) string {
	t.Helper()
	name := databaseName(t.Name(), e.token, e.seq.Add(1))
	ctx, cancel := context.WithTimeout(context.Background(), databaseTimeout)
	defer cancel()
	if err := createDatabase(ctx, e.admin.String(), name, e.template); err != nil {
		t.Fatalf("pgtest: create database %s on %s: %v", name, e.source, err)
	}
	e.mu.Lock()
	e.clones[name] = struct{}{}
	e.mu.Unlock()
	t.Cleanup(func() {
		// t.Context is already cancelled when cleanups run.
		ctx, cancel := context.WithTimeout(context.Background(), databaseTimeout)
		defer cancel()
		if err := dropDatabase(ctx, e.admin.String(), name); err != nil {
			t.Errorf("pgtest: drop database %s: %v", name, err)
			return
		}
		e.mu.Lock()
		delete(e.clones, name)
		e.mu.Unlock()
	})
	return e.url(name)
}

// close drops every database this env created (never any other) and stops the cluster
// it started.
func (e *env) close(ctx context.Context) error {
	if e.cluster != nil {
		return e.cluster.Close() // the whole cluster goes; no need to drop databases
	}
	e.mu.Lock()
	names := make([]string, 0, len(e.clones)+1)
	for name := range e.clones {
		names = append(names, name)
	}
	e.clones = map[string]struct{}{}
	e.mu.Unlock()
	names = append(names, e.template)
	var errs []error
	for _, name := range names {
		if err := dropDatabase(ctx, e.admin.String(), name); err != nil {
			errs = append(errs, fmt.Errorf("drop database %s on %s: %w", name, e.source, err))
		}
	}
	return errors.Join(errs...)
}

// databaseName is the sanitised test name, the process token and a sequence number,
// within PostgreSQL's 63-byte identifier limit.
func databaseName(testName, token string, seq uint64) string {
	suffix := "_" + token + "_" + strconv.FormatUint(seq, 10)
	var b strings.Builder
	underscore := true // no leading '_'
	for _, r := range strings.ToLower(testName) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
			underscore = false
		} else if !underscore {
			b.WriteByte('_')
			underscore = true
		}
	}
	name := b.String()
	if name == "" || (name[0] >= '0' && name[0] <= '9') {
		name = "t" + name
	}
	if len(name) > maxNameLen-len(suffix) {
		name = name[:maxNameLen-len(suffix)]
	}
	name = strings.TrimRight(name, "_")
	return name + suffix
}

func randomToken() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
