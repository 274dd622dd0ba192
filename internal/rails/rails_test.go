package rails

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/countersign/countersign/internal/rail"
	"github.com/countersign/countersign/internal/rail/stripe"
	"github.com/countersign/countersign/internal/sik"
)

// TestMCPBaseURL: an MCP account gets a client for Countersign's own
// tools/list, at mcp.base_url or https://<first host>; a base_url with a
// path, query or another scheme is refused (the endpoint is appended).
func TestMCPBaseURL(t *testing.T) {
	key := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(key, []byte("sk_test_x"), 0o600); err != nil {
		t.Fatal(err)
	}
	adapters := Adapters{sik.RailStripe: func() rail.Adapter { return stripe.New() }}
	for _, tc := range []struct {
		name, baseURL, wantBase, wantErr string
	}{
		{name: "default", wantBase: "https://mcp.stripe.local"},
		{name: "explicit", baseURL: "http://127.0.0.1:9000/", wantBase: "http://127.0.0.1:9000"},
		{name: "path", baseURL: "https://mcp.example/mcp", wantErr: "without a path"},
		{name: "query", baseURL: "https://mcp.example?x=1", wantErr: "without a path"},
		{name: "scheme", baseURL: "ftp://mcp.example", wantErr: "http(s) URL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := New(File{Rails: []AccountConfig{{Account: "acct_mcp", Rail: "stripe", Hosts: []string{"mcp.stripe.local"},
				BaseURL: "https://api.stripe.com", KeyFile: key, MCP: &MCPConfig{Preset: "stripe", BaseURL: tc.baseURL}}}}, adapters, nil)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("New = %v, want an error containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			a, _ := r.ByID("acct_mcp")
			c, ok := a.ToolClient.(*httpClient)
			if !ok || c.base != tc.wantBase || c.auth != "Bearer sk_test_x" {
				t.Fatalf("ToolClient = %+v, want base %s with the account's key", a.ToolClient, tc.wantBase)
			}
			if _, ok := a.Adapter.(rail.ToolDescriber); !ok {
				t.Error("the MCP adapter does not describe tools")
			}
		})
	}
	r, err := New(File{Rails: []AccountConfig{{Account: "acct_rest", Rail: "stripe", Hosts: []string{"api.stripe.com"}, KeyFile: key}}}, adapters, nil)
	if err != nil {
		t.Fatal(err)
	}
	if a, _ := r.ByID("acct_rest"); a.ToolClient != nil {
		t.Error("a REST account has a tool client")
	}
}
