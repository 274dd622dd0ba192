package outbox

import (
	"context"
	"encoding/json"
	"net/netip"
	"strings"
	"testing"
	"time"
)

// A receiver's answer is shown to the owner in last_error only when it came
// from a public address; from an address admitted by
// --webhook-allow-networks (or an unknown one) it goes to the operator's
// log, so that a webhook URL cannot read an internal service back.
func TestAnswerFailure(t *testing.T) {
	for _, tc := range []struct {
		name, addr, body     string
		wantFailure, wantLog string
	}{
		{name: "public keeps the body", addr: "8.8.8.8", body: "no such hook", wantFailure: "HTTP 404: no such hook"},
		{name: "public IPv6 keeps the body", addr: "2606:4700::1111", body: "no such hook", wantFailure: "HTTP 404: no such hook"},
		{name: "allowed internal network", addr: "10.20.1.1", body: `{"db_password":"x"}`, wantFailure: "HTTP 404", wantLog: `answer: {"db_password":"x"}`},
		{name: "allowed loopback", addr: "127.0.0.1", body: "admin page", wantFailure: "HTTP 404", wantLog: "answer: admin page"},
		{name: "IPv4-mapped internal", addr: "::ffff:10.20.1.1", body: "secret", wantFailure: "HTTP 404", wantLog: "answer: secret"},
		{name: "unknown address", addr: "", body: "secret", wantFailure: "HTTP 404", wantLog: "answer: secret"},
		{name: "empty body", addr: "10.20.1.1", wantFailure: "HTTP 404"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var a netip.Addr
			if tc.addr != "" {
				a = netip.MustParseAddr(tc.addr)
			}
			f, d := answerFailure(404, tc.body, a)
			if f != tc.wantFailure || d != tc.wantLog {
				t.Errorf("answerFailure(404, %q, %s) = %q, %q; want %q, %q", tc.body, tc.addr, f, d, tc.wantFailure, tc.wantLog)
			}
		})
	}
}

// The event id a receiver de-duplicates on is in the signed body ("id",
// the outbox id, which Countersign-Delivery also starts with); the
// Countersign-Delivery header itself is not signed. So a body replayed
// under another Countersign-Delivery still carries its own id, and a body
// whose id is changed no longer verifies.
func TestSignedBodyCarriesTheEventID(t *testing.T) {
	rc := newReceiver(t, always(200))
	f := newFixture(t, rc)
	f.applied(t, 1)
	d := &Dispatcher{Store: f.store, Addresses: loopback, Owner: "dispatcher-1", BaseBackoff: time.Millisecond, MaxBackoff: time.Millisecond}
	if n, _, _, err := d.Pass(context.Background()); err != nil || n != 1 {
		t.Fatalf("Pass delivered %d, %v", n, err)
	}
	g := rc.requests()[0]
	if g.verifyErr != nil {
		t.Fatalf("delivery does not verify: %v", g.verifyErr)
	}
	var body map[string]any
	if err := json.Unmarshal(g.body, &body); err != nil {
		t.Fatal(err)
	}
	id, _ := body["id"].(string)
	if id == "" || g.delivery != id+"-"+f.webhook.ID {
		t.Fatalf("body id %q, Countersign-Delivery %q: want the delivery to be <id>-%s", id, g.delivery, f.webhook.ID)
	}
	forged := strings.Replace(string(g.body), `"id": "`+id+`"`, `"id": "9`+id+`"`, 1)
	if forged == string(g.body) {
		forged = strings.Replace(string(g.body), `"id":"`+id+`"`, `"id":"9`+id+`"`, 1)
	}
	if forged == string(g.body) {
		t.Fatalf("could not find the id in %s", g.body)
	}
	if err := Verify(testSecret, g.signature, []byte(forged), time.Minute, time.Now()); err == nil {
		t.Errorf("a body with its id changed still verifies")
	}
}
