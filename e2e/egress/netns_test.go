// Package egress runs the script of the injector's egress init container
// (internal/inject, --close-egress) against a real kernel: in a network
// and mount namespace of its own, with real iptables and ip6tables, a DNS
// server of the test's and connections made as the agent's UID and as
// another one.
package egress

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	jsonpatch "github.com/evanphx/json-patch/v5"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"

	"github.com/countersign/countersign/internal/inject"
)

// helperEnv tells a re-executed test binary what it is: "netns" (the test
// inside its namespaces) or "probe" (connections as another UID).
const helperEnv = "COUNTERSIGN_EGRESS_HELPER"

const agentUID, otherUID = 1000, 1001

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) == "probe" {
		probe(os.Args[1:])
		return
	}
	os.Exit(m.Run())
}

// TestEgressRulesInANetworkNamespace: the script the injector builds,
// run as the init container would (root, sh -ec), rejects with a TCP
// reset every connection the agent's UID makes to a closed host (each of
// its addresses, in both families) or CIDR, and nothing else: another
// UID's connections, and loopback (Envoy) even under 0.0.0.0/0. Run again,
// as after a pod restart, it leaves one jump from OUTPUT; with no DNS
// answer it fails, so the pod does not start with the host open.
func TestEgressRulesInANetworkNamespace(t *testing.T) {
	if os.Getenv(helperEnv) == "netns" {
		inNamespace(t)
		return
	}
	exe := requirements(t)
	cmd := exec.Command("unshare", "--net", "--mount", exe, "-test.run=^TestEgressRulesInANetworkNamespace$", "-test.v")
	cmd.Env = append(os.Environ(), helperEnv+"=netns")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("in the namespaces: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}

// requirements skips the test where it cannot run, and returns a copy of
// the test binary that the agent's UID can execute.
func requirements(t *testing.T) string {
	t.Helper()
	// .ci/run installs what this needs and sets COUNTERSIGN_REQUIRE_NETNS:
	// there, a missing piece fails the test instead of skipping it.
	skip := t.Skipf
	if os.Getenv("COUNTERSIGN_REQUIRE_NETNS") != "" {
		skip = t.Fatalf
	}
	if runtime.GOOS != "linux" || os.Geteuid() != 0 {
		skip("needs Linux and root (iptables in a network namespace of its own)")
	}
	for _, tool := range []string{"iptables", "ip6tables", "ip", "unshare", "sh"} {
		if _, err := exec.LookPath(tool); err != nil {
			skip("needs %s: %v", tool, err)
		}
	}
	if out, err := exec.Command("unshare", "--net", "--mount", "true").CombinedOutput(); err != nil {
		skip("cannot make a network and mount namespace: %v %s", err, out)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "countersign-egress-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	raw, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(dir, "egress.test")
	if err := os.WriteFile(exe, raw, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return exe
}

// The world inside the namespace: rail hosts the test's DNS server
// answers for, and addresses on a veth that nothing answers on.
var (
	records = map[string][]string{
		"api.stripe.com.":   {"198.51.100.10", "198.51.100.11", "2001:db8:99::10"},
		"api.razorpay.com.": {"198.51.100.20"}, // no IPv6 address
	}
	closed = []string{"198.51.100.10:443", "198.51.100.11:443", "198.51.100.20:443", "203.0.113.5:443",
		"[2001:db8:99::10]:443", "[2001:db8:5::1]:443", "udp:198.51.100.10:443"}
	open = []string{"198.51.100.30:443", "[2001:db8:99::30]:443", "udp:198.51.100.30:443"}
)

func inNamespace(t *testing.T) {
	v6 := exists("/proc/net/if_inet6")
	network(t, v6)
	resolv := filepath.Join(t.TempDir(), "resolv.conf")
	if err := os.WriteFile(resolv, []byte("nameserver 127.0.0.1\noptions timeout:1 attempts:1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount(resolv, "/etc/resolv.conf", "", syscall.MS_BIND, ""); err != nil {
		t.Fatalf("bind %s: %v", resolv, err)
	}
	script := egressScript(t, inject.EgressConfig{
		Enabled: true, Image: "registry.example/iptables:1.8.11", AgentUID: agentUID,
		Hosts: []string{"api.stripe.com", "api.razorpay.com"}, CIDRs: []string{"203.0.113.0/24", "2001:db8:5::/48"},
	})

	// No DNS answer yet: the script must fail.
	if out, err := runScript(script); err == nil || !strings.Contains(out, "resolves to no address") {
		t.Fatalf("without DNS the script did not fail closed: %v\n%s", err, out)
	}
	serveDNS(t)
	for run := 1; run <= 2; run++ { // the second as after a restart
		if out, err := runScript(script); err != nil {
			t.Fatalf("run %d: %v\n%s", run, err, out)
		}
	}
	families := []string{"iptables"}
	if v6 {
		families = append(families, "ip6tables")
	}
	for _, tool := range families {
		out, err := exec.Command(tool, "-S", "OUTPUT").CombinedOutput()
		if n := strings.Count(string(out), "-j COUNTERSIGN_EGRESS"); err != nil || n != 1 ||
			!strings.Contains(string(out), fmt.Sprintf("--uid-owner %d -j COUNTERSIGN_EGRESS", agentUID)) {
			t.Errorf("%s OUTPUT after two runs (want one jump for UID %d): %v\n%s", tool, agentUID, err, out)
		}
	}
	want := map[string]string{}
	for _, a := range closed {
		want[a] = "rejected"
	}
	for _, a := range open {
		want[a] = "not rejected"
	}
	expect(t, agentUID, want, v6)
	for a := range want {
		want[a] = "not rejected"
	}
	expect(t, otherUID, want, v6)

	// Everything closed but loopback: Envoy is still there.
	l, err := net.Listen("tcp", "127.0.0.1:15001")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	all := egressScript(t, inject.EgressConfig{Enabled: true, Image: "registry.example/iptables:1.8.11", AgentUID: agentUID, CIDRs: []string{"0.0.0.0/0", "::/0"}})
	if out, err := runScript(all); err != nil {
		t.Fatalf("0.0.0.0/0: %v\n%s", err, out)
	}
	expect(t, agentUID, map[string]string{"127.0.0.1:15001": "connected", "198.51.100.30:443": "rejected", "[2001:db8:99::30]:443": "rejected"}, v6)
}

// egressScript is the script of the egress container the injector adds
// to a pod that runs as the agent's UID, under cfg.
func egressScript(t *testing.T, egress inject.EgressConfig) string {
	t.Helper()
	cfg := inject.Config{
		Namespace: "countersign-system", Version: "test",
		CountersignImage: "registry.example/countersign:v0.1.0", EnvoyImage: "envoyproxy/envoy:distroless-v1.40.2",
		EnvoyConfigMap: "countersign-envoy-sidecar", EnvoyConfigKey: "envoy.yaml",
		RailsConfigMap: "countersign-rails", RailsConfigKey: "rails.yaml",
		DatabaseSecret: "countersign-database", DatabaseKey: "url",
		RailKeys: []inject.RailKey{{Account: "stripe_main", Secret: "countersign-stripe-main", Key: "key"}},
		BaseURLs: []inject.EnvVar{{Name: "STRIPE_API_BASE", Value: "http://stripe.egress.local:15001"}},
		HTTPPort: 15080, Egress: egress,
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	uid := int64(agentUID)
	pod := &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: "agent", Namespace: "agents"},
		Spec: corev1.PodSpec{
			SecurityContext: &corev1.PodSecurityContext{RunAsUser: &uid, RunAsNonRoot: &[]bool{true}[0]},
			Containers: []corev1.Container{{Name: "agent", Image: "registry.example/agent:1.0",
				SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: &[]bool{false}[0]}}},
		},
	}
	raw, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	req := &admissionv1.AdmissionRequest{UID: "egress", Namespace: "agents", Operation: admissionv1.Create,
		Kind: metav1.GroupVersionKind{Version: "v1", Kind: "Pod"}, Object: k8sruntime.RawExtension{Raw: raw}}
	resp := inject.Mutate(req, pod, cfg, inject.ScopeNamespace)
	if !resp.Allowed || len(resp.Patch) == 0 {
		t.Fatalf("not injected: %+v", resp.Result)
	}
	p, err := jsonpatch.DecodePatch(resp.Patch)
	if err != nil {
		t.Fatal(err)
	}
	out, err := p.Apply(raw)
	if err != nil {
		t.Fatal(err)
	}
	var guarded corev1.Pod
	if err := json.Unmarshal(out, &guarded); err != nil {
		t.Fatal(err)
	}
	c := guarded.Spec.InitContainers[0]
	if c.Name != inject.EgressContainer || len(c.Command) != 3 || c.Command[0] != "/bin/sh" || c.Command[1] != "-ec" {
		t.Fatalf("the first init container is not the egress container: %s %q", c.Name, c.Command)
	}
	return c.Command[2]
}

func runScript(script string) (string, error) {
	out, err := exec.Command("sh", "-ec", script).CombinedOutput()
	return string(out), err
}

// network: loopback up, and a veth with the addresses and routes the
// probes go to (nothing answers there).
func network(t *testing.T, v6 bool) {
	t.Helper()
	cmds := [][]string{
		{"link", "set", "lo", "up"},
		{"link", "add", "cs0", "type", "veth", "peer", "name", "cs1"},
		{"link", "set", "cs0", "up"}, {"link", "set", "cs1", "up"},
		{"addr", "add", "198.51.100.1/24", "dev", "cs0"},
		{"route", "add", "203.0.113.0/24", "dev", "cs0"},
	}
	if v6 {
		cmds = append(cmds, []string{"-6", "addr", "add", "2001:db8:99::1/64", "dev", "cs0", "nodad"},
			[]string{"-6", "route", "add", "2001:db8:5::/48", "dev", "cs0"})
	}
	for _, c := range cmds {
		if out, err := exec.Command("ip", c...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v %s", strings.Join(c, " "), err, out)
		}
	}
}

// expect runs the probes as uid and compares what each got.
func expect(t *testing.T, uid int, want map[string]string, v6 bool) {
	t.Helper()
	var addrs []string
	for a := range want {
		if v6 || !strings.Contains(a, "[") {
			addrs = append(addrs, a)
		}
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self, addrs...)
	cmd.Env = []string{helperEnv + "=probe"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("probe as UID %d: %v", uid, err)
	}
	got := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		a, r, _ := strings.Cut(line, " ")
		got[a] = r
	}
	for _, a := range addrs {
		switch g := got[a]; {
		case want[a] == "not rejected" && g == "rejected":
			t.Errorf("UID %d to %s: rejected, want it left open", uid, a)
		case want[a] != "not rejected" && g != want[a]:
			t.Errorf("UID %d to %s: %s, want %s", uid, a, g, want[a])
		}
	}
}

// probe (as another UID) connects to each address and prints
// "ADDR rejected|connected|<error>".
func probe(addrs []string) {
	for _, a := range addrs {
		fmt.Println(a, attempt(a))
	}
}

func attempt(a string) string {
	if host, ok := strings.CutPrefix(a, "udp:"); ok {
		c, err := net.Dial("udp", host)
		if err != nil {
			return err.Error()
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(300 * time.Millisecond))
		if _, err = c.Write([]byte("x")); err == nil {
			_, err = c.Read(make([]byte, 1))
		}
		if errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.ECONNREFUSED) {
			return "rejected"
		}
		return fmt.Sprint(err)
	}
	c, err := net.DialTimeout("tcp", a, 300*time.Millisecond)
	switch {
	case err == nil:
		c.Close()
		return "connected"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "rejected"
	}
	return err.Error()
}

// serveDNS answers A and AAAA queries for records on 127.0.0.1:53.
func serveDNS(t *testing.T) {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:53")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 512)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			if reply := answer(buf[:n]); reply != nil {
				_, _ = pc.WriteTo(reply, from)
			}
		}
	}()
}

// answer builds the reply to one DNS query (RFC 1035 §4), or nil.
func answer(q []byte) []byte {
	if len(q) < 12 {
		return nil
	}
	i, name := 12, ""
	for i < len(q) && q[i] != 0 {
		l := int(q[i])
		if i+1+l > len(q) {
			return nil
		}
		name += strings.ToLower(string(q[i+1:i+1+l])) + "."
		i += 1 + l
	}
	if i+5 > len(q) {
		return nil
	}
	qtype := binary.BigEndian.Uint16(q[i+1:])
	question := q[12 : i+5]
	addrs, known := records[name]
	var answers [][]byte
	for _, s := range addrs {
		ip := netip.MustParseAddr(s)
		if (qtype == 1 && ip.Is4()) || (qtype == 28 && ip.Is6()) {
			answers = append(answers, ip.AsSlice())
		}
	}
	flags := uint16(0x8180) // a response, recursion desired and available
	if !known {
		flags |= 3 // NXDOMAIN
	}
	out := binary.BigEndian.AppendUint16(nil, binary.BigEndian.Uint16(q))
	out = binary.BigEndian.AppendUint16(out, flags)
	for _, n := range []int{1, len(answers), 0, 0} {
		out = binary.BigEndian.AppendUint16(out, uint16(n))
	}
	out = append(out, question...)
	for _, data := range answers {
		out = append(out, 0xc0, 12) // the question's name
		out = binary.BigEndian.AppendUint16(out, qtype)
		out = binary.BigEndian.AppendUint16(out, 1) // IN
		out = binary.BigEndian.AppendUint32(out, 60)
		out = binary.BigEndian.AppendUint16(out, uint16(len(data)))
		out = append(out, data...)
	}
	return out
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
