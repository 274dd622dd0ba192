package ownerauth_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
	"github.com/countersign/countersign/internal/api"
	"github.com/countersign/countersign/internal/ledger"
	"github.com/countersign/countersign/internal/ownerauth"
	"github.com/countersign/countersign/internal/testing/wait"
)

// liveTokens is a TokenStore whose tokens can be revoked while it is read,
// and which counts its lookups.
type liveTokens struct {
	mu      sync.Mutex
	byHash  map[[32]byte]ledger.OwnerToken
	lookups atomic.Int32
}

func (f *liveTokens) LookupOwnerToken(_ context.Context, hash [32]byte) (ledger.OwnerToken, error) {
	f.lookups.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	if t, ok := f.byHash[hash]; ok {
		return t, nil
	}
	return ledger.OwnerToken{}, ledger.ErrNotFound
}

func (f *liveTokens) add(t *testing.T, tok ledger.OwnerToken) string {
	t.Helper()
	secret, hash, err := ownerauth.MintToken()
	if err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.byHash == nil {
		f.byHash = map[[32]byte]ledger.OwnerToken{}
	}
	f.byHash[hash] = tok
	return secret
}

func (f *liveTokens) revoke(id string, at time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for h, tok := range f.byHash {
		if tok.ID == id {
			tok.RevokedAt = &at
			f.byHash[h] = tok
		}
	}
}

// openWatch sends one message, then stays open until its context ends, as
// the owner service's watch streams do.
type openWatch struct {
	countersignv1.UnimplementedOwnerServiceServer
}

func (openWatch) WatchIntents(_ *countersignv1.WatchIntentsRequest, ss grpc.ServerStreamingServer[countersignv1.WatchIntentsResponse]) error {
	if err := ss.Send(&countersignv1.WatchIntentsResponse{}); err != nil {
		return err
	}
	<-ss.Context().Done()
	return status.FromContextError(ss.Context().Err()).Err()
}

// watch opens WatchIntents through g with the owner token secret and
// returns a channel that receives how the stream ended.
func watch(t *testing.T, g *ownerauth.Guard, secret string) <-chan error {
	t.Helper()
	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(g.Unary()), grpc.ChainStreamInterceptor(g.Stream()))
	countersignv1.RegisterOwnerServiceServer(srv, openWatch{})
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ctx, cancel := context.WithCancel(withAuth("Bearer " + secret))
	t.Cleanup(cancel)
	st, err := countersignv1.NewOwnerServiceClient(conn).WatchIntents(ctx, &countersignv1.WatchIntentsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); err != nil {
		t.Fatalf("the stream did not open: %v", err)
	}
	ended := make(chan error, 1)
	go func() {
		for {
			if _, err := st.Recv(); err != nil {
				ended <- err
				return
			}
		}
	}()
	return ended
}

func endedWithin(d time.Duration, ended <-chan error) (error, bool) {
	var err error
	ok := wait.Until(d, func() bool {
		select {
		case err = <-ended:
			return true
		default:
			return false
		}
	})
	return err, ok
}

// TestAnOwnerStreamEndsWhenItsCredentialStopsAuthenticating: a watch
// stream is bound to the owner credential that opened it. Before, the
// guard authenticated a stream once, when it opened, and a WatchIntents
// stream kept sending the owner's intents for as long as its holder kept
// it open after the token was revoked (or expired).
func TestAnOwnerStreamEndsWhenItsCredentialStopsAuthenticating(t *testing.T) {
	const recheck = 100 * time.Millisecond
	open := func(t *testing.T, expires time.Time, every time.Duration) (*liveTokens, <-chan error) {
		store := &liveTokens{}
		secret := store.add(t, ledger.OwnerToken{ID: "otk_alice", OwnerID: "own_alice", ExpiresAt: expires})
		a, err := ownerauth.New(ownerauth.Config{}, store)
		if err != nil {
			t.Fatal(err)
		}
		return store, watch(t, &ownerauth.Guard{Auth: a, ToStatus: api.ToStatus, Recheck: every}, secret)
	}
	t.Run("revoked mid-stream: ends within the recheck period", func(t *testing.T) {
		store, ended := open(t, time.Now().Add(time.Hour), recheck)
		revoked := time.Now()
		store.revoke("otk_alice", revoked)
		err, ok := endedWithin(5*time.Second, ended)
		if !ok {
			t.Fatal("the stream stayed open after its owner token was revoked")
		}
		if took := time.Since(revoked); took > 2*recheck+time.Second {
			t.Errorf("the stream ended %s after the revocation; want within about %s", took, recheck)
		}
		if status.Code(err) != codes.Unauthenticated || !strings.Contains(err.Error(), "revoked") {
			t.Fatalf("the stream ended with %v; want Unauthenticated, revoked", err)
		}
	})
	t.Run("a good token keeps its stream open across re-checks", func(t *testing.T) {
		store, ended := open(t, time.Now().Add(time.Hour), recheck)
		opened := store.lookups.Load()
		if !wait.Until(5*time.Second, func() bool { return store.lookups.Load() >= opened+3 }) {
			t.Fatalf("the stream's token was not looked up again (%d lookups)", store.lookups.Load())
		}
		select {
		case err := <-ended:
			t.Fatalf("the stream ended while its token was good: %v", err)
		default:
		}
	})
	t.Run("ends when its token expires, without waiting for a re-check", func(t *testing.T) {
		_, ended := open(t, time.Now().Add(300*time.Millisecond), time.Hour)
		err, ok := endedWithin(5*time.Second, ended)
		if !ok {
			t.Fatal("the stream outlived its owner token's expiry")
		}
		if status.Code(err) != codes.Unauthenticated || !strings.Contains(err.Error(), "expired") {
			t.Fatalf("the stream ended with %v; want Unauthenticated, expired", err)
		}
	})
}

// TestAnOIDCSessionFollowsTheAllowlist: a console session opened through
// OIDC authenticates only while its subject would be admitted now. Before,
// a session (up to 24 hours) outlived the subject's removal from
// owner-allowed-subjects, a change of issuer, and OIDC being turned off,
// while the subject's own JWT was refused.
func TestAnOIDCSessionFollowsTheAllowlist(t *testing.T) {
	rsaK, _, _, _ := testKeys(t)
	file := writeJWKSFile(t, jwks(t, rsaK))
	clk := newClock()
	tag := sha256.Sum256([]byte(testIssuer))
	aliceID := "oidc:" + hex.EncodeToString(tag[:6]) + ":alice"
	store := &fakeSessions{}
	secret := store.add(t, ledger.OwnerSession{ID: "oss_alice", OwnerID: aliceID, Subject: "alice", Method: "oidc",
		ExpiresAt: clk.Now().Add(8 * time.Hour)})
	oidc := func(mutate func(*ownerauth.Config)) ownerauth.Config {
		c := ownerauth.Config{Issuer: testIssuer, Audience: testAudience, JWKSFile: file, AllowedSubjects: []string{"alice", "bob"}, Now: clk.Now}
		if mutate != nil {
			mutate(&c)
		}
		return c
	}
	tests := []struct {
		name   string
		cfg    ownerauth.Config
		errHas string // "" = admitted
	}{
		{"subject allowed", oidc(nil), ""},
		{"subject removed from the allowlist", oidc(subjects("bob")), "no longer in owner-allowed-subjects"},
		{"subject removed, a group allowlist remains", oidc(both("bob", "owners")), "no longer in owner-allowed-subjects"},
		{"another issuer", oidc(func(c *ownerauth.Config) { c.Issuer = "https://id.example.test/realms/other" }), "another OIDC issuer"},
		{"OIDC turned off", ownerauth.Config{Now: clk.Now}, "OIDC, which is now off"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a, err := ownerauth.New(tc.cfg, store)
			if err != nil {
				t.Fatal(err)
			}
			o, err := a.Authenticate(context.Background(), "Bearer "+secret)
			switch {
			case tc.errHas == "" && (err != nil || o.ID != aliceID):
				t.Fatalf("Authenticate = %+v, %v; want %s", o, err, aliceID)
			case tc.errHas != "" && (!errors.Is(err, ownerauth.ErrUnauthenticated) || !strings.Contains(err.Error(), tc.errHas)):
				t.Fatalf("Authenticate = %+v, %v; want ErrUnauthenticated, %q", o, err, tc.errHas)
			}
			if _, err2 := a.Session(context.Background(), secret); (err2 == nil) != (err == nil) {
				t.Fatalf("Session and Authenticate disagree: %v, %v", err2, err)
			}
		})
	}
}

// TestAGroupOnlyOwnerGetsNoConsoleSession: a session cannot check group
// membership again (the groups are not stored), so the console's OIDC
// sign-in opens none for a subject admitted only through a group; a
// subject on the subject allowlist still signs in.
func TestAGroupOnlyOwnerGetsNoConsoleSession(t *testing.T) {
	rsaK, _, _, _ := testKeys(t)
	clk := newClock()
	a := newOIDC(t, clk, "file", jwks(t, rsaK), both("alice", "owners"))
	idToken := func(sub string) string {
		c := with(claimsAt(clk.Now(), sub), "aud", testAudience)
		c = with(c, "nonce", "n-1")
		return sign(t, rsaK, with(c, "groups", []string{"owners"}))
	}
	if _, err := a.Authenticate(context.Background(), "Bearer "+sign(t, rsaK, with(claimsAt(clk.Now(), "carol"), "groups", []string{"owners"}))); err != nil {
		t.Fatalf("carol's JWT (group owners) = %v; want admitted to the owner API", err)
	}
	if _, err := a.VerifyIDToken(context.Background(), idToken("carol"), testAudience, "n-1"); !errors.Is(err, ownerauth.ErrNotAllowed) {
		t.Fatalf("carol's ID token (group only) = %v; want ErrNotAllowed", err)
	}
	if o, err := a.VerifyIDToken(context.Background(), idToken("alice"), testAudience, "n-1"); err != nil || o.Subject != "alice" {
		t.Fatalf("alice's ID token = %+v, %v; want admitted", o, err)
	}
}
