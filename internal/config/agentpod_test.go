package config

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

// clearPGEnv empties the PG* variables pgconn reads, so that the machine
// running the test does not choose a case's sslmode or host.
func clearPGEnv(t *testing.T) {
	t.Helper()
	for _, v := range []string{"PGHOST", "PGPORT", "PGSSLMODE", "PGSSLROOTCERT", "PGSSLCERT", "PGSSLKEY", "PGSSLNEGOTIATION",
		"PGSERVICE", "PGSERVICEFILE", "PGSSLCERTMODE", "PGSSLSNI", "PGTARGETSESSIONATTRS"} {
		t.Setenv(v, "") // restored after the test
		if err := os.Unsetenv(v); err != nil {
			t.Fatal(err)
		}
	}
}

// TestInAgentPodRefusesALedgerTheAgentCouldAnswer: in the agent's pod the
// agent shares loopback and /etc/hosts (the kubelet writes the pod's own
// host name there, which the pod spec chooses), so serve refuses every
// ledger host not reached with sslmode=verify-full, and loopback hosts
// (found by a review: the ledger's name could resolve to the pod's own
// address, where the agent ran a fake Postgres that decided its payments).
func TestInAgentPodRefusesALedgerTheAgentCouldAnswer(t *testing.T) {
	const env = "database-url (COUNTERSIGN_DATABASE_URL) with in-agent-pod (COUNTERSIGN_IN_AGENT_POD): "
	ca := writeCA(t)
	cases := []struct {
		name, url string
		pgEnv     map[string]string
		want      []string // empty: valid
	}{
		{"verify-full", "postgres://cs@db.example:5432/cs?sslmode=verify-full", nil, nil},
		{"verify-full through PGSSLMODE", "postgres://cs@db.example/cs", map[string]string{"PGSSLMODE": "verify-full"}, nil},
		{"sslrootcert=system means verify-full", "postgres://cs@db.example/cs?sslrootcert=system", nil, nil},
		{"every host verify-full", "postgres://cs@db-a.example:5432,db-b.example:5433/cs?sslmode=verify-full", nil, nil},
		{"no sslmode is prefer", "postgres://cs@db.example/cs", nil,
			[]string{env + "host db.example:5432 is reached with sslmode=prefer (the default when none is set), which falls back to no TLS: the agent shares"}},
		{"require", "postgres://cs@db.example/cs?sslmode=require", nil, []string{"host db.example:5432 is reached with sslmode=require, which checks no certificate"}},
		{"ssl=true is require", "postgres://cs@db.example/cs?ssl=true", nil, []string{"sslmode=require"}},
		{"verify-ca with sslrootcert=system is verify-full", "postgres://cs@db.example/cs?sslmode=verify-ca&sslrootcert=system", nil, nil},
		{"verify-ca", "postgres://cs@db.example/cs?sslmode=verify-ca&sslrootcert=" + ca, nil,
			[]string{"sslmode=verify-ca (or require with sslrootcert), which checks the certificate's issuer but not that it names the host"}},
		{"require with sslrootcert is verify-ca", "postgres://cs@db.example/cs?sslmode=require&sslrootcert=" + ca, nil, []string{"sslmode=verify-ca"}},
		{"disable", "postgres://cs@db.example/cs?sslmode=disable", nil, []string{"sslmode=disable (no TLS)"}},
		{"allow", "postgres://cs@db.example/cs?sslmode=allow", nil, []string{"sslmode=allow (no TLS first)"}},
		{"PGSSLMODE require", "postgres://cs@db.example/cs", map[string]string{"PGSSLMODE": "require"}, []string{"sslmode=require"}},
		{"the URL's verify-full wins over PGSSLMODE", "postgres://cs@db.example/cs?sslmode=verify-full", map[string]string{"PGSSLMODE": "disable"}, nil},
		{"the URL's disable wins over PGSSLMODE", "postgres://cs@db.example/cs?sslmode=disable", map[string]string{"PGSSLMODE": "verify-full"}, []string{"sslmode=disable"}},
		{"localhost", "postgres://cs@localhost/cs?sslmode=verify-full", nil,
			[]string{env + "host localhost:5432 is a loopback address: the agent shares this pod's loopback"}},
		{"loopback address", "postgres://cs@127.0.0.2:6432/cs?sslmode=verify-full", nil, []string{"host 127.0.0.2:6432 is a loopback address"}},
		{"IPv6 loopback", "postgres://cs@[::1]/cs?sslmode=verify-full", nil, []string{"host [::1]:5432 is a loopback address"}},
		{"unspecified address", "postgres://cs@0.0.0.0/cs?sslmode=verify-full", nil, []string{"host 0.0.0.0:5432 is a loopback address"}},
		{"a loopback host in a host list", "postgres://cs@db.example,127.0.0.1/cs?sslmode=verify-full", nil, []string{"host 127.0.0.1:5432 is a loopback address"}},
		{"a host list in the host parameter", "postgres:///cs?host=db-a.example,db-b.example&sslmode=prefer", nil,
			[]string{"host db-a.example:5432 is reached with sslmode=prefer", "host db-b.example:5432 is reached with sslmode=prefer"}},
		{"the URL's host list with PGSSLMODE", "postgres://cs@db-a.example,db-b.example/cs", map[string]string{"PGSSLMODE": "verify-ca", "PGSSLROOTCERT": ca},
			[]string{"host db-a.example:5432 is reached with sslmode=verify-ca", "host db-b.example:5432 is reached with sslmode=verify-ca"}},
		{"verify-full through PGSSLMODE with PGSSLROOTCERT", "postgres://cs@db-a.example,db-b.example/cs", map[string]string{"PGSSLMODE": "verify-full", "PGSSLROOTCERT": ca}, nil},
		{"a Unix socket", "postgres:///cs?host=/var/run/postgresql&sslmode=verify-full", nil, []string{"host /var/run/postgresql is a Unix socket, over which no TLS is used"}},
		{"no host at all", "postgres:///cs?sslmode=verify-full", nil, []string{"is a Unix socket"}},
		{"unparseable", "postgres://cs@db.example:notaport/cs", nil, []string{env + "cannot parse"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			clearPGEnv(t)
			for k, v := range tc.pgEnv {
				t.Setenv(k, v)
			}
			c := Defaults()
			c.DatabaseURL, c.InAgentPod = tc.url, true
			err := c.Validate()
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("Validate() = %v, want valid", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate() accepted %s in the agent's pod, want %q", tc.url, tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Validate() = %v, want %q", err, w)
				}
			}
			// Off the agent's pod none of it is this check's to refuse.
			c.InAgentPod = false
			if err := c.Validate(); err != nil && strings.Contains(err.Error(), "in-agent-pod") {
				t.Errorf("without in-agent-pod: %v", err)
			}
		})
	}
}

// TestInAgentPodIsAFlagAndAnEnvironmentVariable: the injector sets it as
// COUNTERSIGN_IN_AGENT_POD.
func TestInAgentPodIsAFlagAndAnEnvironmentVariable(t *testing.T) {
	for _, args := range [][]string{{"--in-agent-pod"}, {}} {
		cfg := Defaults()
		fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
		cfg.BindServe(fs)
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		if err := Resolve(fs, env(map[string]string{"COUNTERSIGN_IN_AGENT_POD": "true"})); err != nil {
			t.Fatal(err)
		}
		if !cfg.InAgentPod {
			t.Errorf("%v: in-agent-pod is off", args)
		}
	}
	if EnvName(InAgentPodFlag) != "COUNTERSIGN_IN_AGENT_POD" || Defaults().InAgentPod {
		t.Error("in-agent-pod is COUNTERSIGN_IN_AGENT_POD, off by default")
	}
}

// writeCA writes a self-signed CA certificate (PEM) for sslrootcert.
func writeCA(t *testing.T) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "ledger CA"}, IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
