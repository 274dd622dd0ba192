package inject

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// EgressConfig is the optional init container that closes the agent's
// direct egress to the rail hosts: iptables and ip6tables rules that
// reject what the agent's UID sends there, so that its only way to a rail
// is the local Envoy. The rules match a UID, so an agent pod is injected
// only if none of its containers can run as another one (egressRefusals).
type EgressConfig struct {
	Enabled bool
	// Image runs the rules: it must have /bin/sh, iptables and ip6tables.
	Image string
	// AgentUID is the UID every agent container runs as, and the one the
	// rules match (-m owner --uid-owner).
	AgentUID int64
	// Hosts are DNS names, resolved once, when the init container runs;
	// CIDRs are exact. At least one of the two.
	Hosts, CIDRs []string
}

// Names of the egress init container and its volume.
const (
	EgressContainer = "countersign-egress"
	// XtablesVolume is iptables' lock directory (/run/xtables.lock): the
	// container's root filesystem is read-only.
	XtablesVolume = "countersign-xtables-lock"
	// NoTokenVolume, empty and read-only, takes the place of the service
	// account token in every container the injector adds: the
	// ServiceAccount admission plugin, which runs again after the
	// injector's patch, mounts a token into every container that has
	// nothing at that path, and none of ours needs one.
	NoTokenVolume     = "countersign-no-token"
	serviceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"

	// egressChain holds the rules; OUTPUT jumps to it for AgentUID once.
	egressChain = "COUNTERSIGN_EGRESS"
	// maxUID is the largest runAsUser the API server accepts.
	maxUID = 1<<31 - 1
)

// validateEgress names each bad egress setting (the flags' names).
func (c Config) validateEgress() []error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	e := c.Egress
	if !e.Enabled {
		if e.Image != "" || e.AgentUID != 0 || len(e.Hosts) > 0 || len(e.CIDRs) > 0 {
			bad("egress-image, egress-agent-uid, egress-close-host and egress-close-cidr take effect only with close-egress: set it, or drop them")
		}
		return errs
	}
	if msg := imageProblem("egress-image", e.Image); msg != "" {
		bad("%s", msg)
	}
	switch {
	case e.AgentUID < 1 || e.AgentUID > maxUID:
		bad("egress-agent-uid must be the agent's UID, 1-%d (never root), got %d", maxUID, e.AgentUID)
	case e.AgentUID == countersignUID:
		bad("egress-agent-uid %d is the injected countersign's UID: the agent needs a UID of its own, or the rules would match Countersign too", e.AgentUID)
	case e.AgentUID == envoyUID:
		bad("egress-agent-uid %d is the injected Envoy's UID: the agent needs a UID of its own, or the rules would close Envoy's own way to the rails", e.AgentUID)
	}
	if len(e.Hosts) == 0 && len(e.CIDRs) == 0 {
		bad("close-egress needs at least one egress-close-host or egress-close-cidr: what to close")
	}
	aliases := aliasHosts(c)
	seen := map[string]bool{}
	for _, h := range e.Hosts {
		switch {
		case seen[h]:
			bad("egress-close-host %q is given twice", h)
		case net4or6(h):
			bad("egress-close-host %q is an address: give it as egress-close-cidr (%s/32 or /128)", h, h)
		case !dnsSubdom.MatchString(h) || len(h) > 253 || !strings.Contains(h, ".") || slices.ContainsFunc(strings.Split(h, "."), func(l string) bool { return len(l) > 63 }):
			bad("egress-close-host %q is not a lowercase DNS name of at least two labels (e.g. api.stripe.com)", h)
		case slices.Contains(aliases, h):
			bad("egress-close-host %q is a base URL host, which the pod aliases to Envoy's 127.0.0.1: close the rail's own host (e.g. api.stripe.com)", h)
		}
		seen[h] = true
	}
	for _, s := range e.CIDRs {
		p, err := netip.ParsePrefix(s)
		switch {
		case err != nil:
			bad("egress-close-cidr %q is not a CIDR (e.g. 203.0.113.0/24 or 2001:db8::/32)", s)
		case p.Addr().Is4In6():
			bad("egress-close-cidr %q is an IPv4-mapped IPv6 prefix: write it as IPv4", s)
		case p != p.Masked():
			bad("egress-close-cidr %q has bits set past its prefix length: did you mean %s?", s, p.Masked())
		case seen[p.String()]:
			bad("egress-close-cidr %q is given twice", s)
		case loopback(p):
			bad("egress-close-cidr %q is loopback, where the agent reaches Envoy: loopback is never closed", s)
		}
		if err == nil {
			seen[p.String()] = true
		}
	}
	return errs
}

func net4or6(s string) bool {
	_, err := netip.ParseAddr(s)
	return err == nil
}

// loopback says a prefix lies within 127.0.0.0/8 or ::1/128.
func loopback(p netip.Prefix) bool {
	if p.Addr().Is4() {
		return p.Bits() >= 8 && netip.MustParsePrefix("127.0.0.0/8").Contains(p.Addr())
	}
	return p.Bits() == 128 && p.Addr() == netip.IPv6Loopback()
}

// egressContainer is the init container that runs the rules: plain (not
// restartable), first, root with NET_ADMIN and NET_RAW (what iptables
// needs) and nothing else, done before any other container of the pod,
// the agent's included, starts.
func egressContainer(cfg Config) corev1.Container {
	return corev1.Container{
		Name:            EgressContainer,
		Image:           cfg.Egress.Image,
		ImagePullPolicy: cfg.PullPolicy,
		Command:         []string{"/bin/sh", "-ec", egressScript(cfg.Egress)},
		VolumeMounts: []corev1.VolumeMount{
			{Name: XtablesVolume, MountPath: "/run"},
			{Name: NoTokenVolume, MountPath: serviceAccountDir, ReadOnly: true},
		},
		SecurityContext: &corev1.SecurityContext{
			RunAsUser:                ptr(int64(0)),
			RunAsGroup:               ptr(int64(0)),
			RunAsNonRoot:             ptr(false),
			ReadOnlyRootFilesystem:   ptr(true),
			AllowPrivilegeEscalation: ptr(false),
			Privileged:               ptr(false),
			Capabilities:             &corev1.Capabilities{Add: []corev1.Capability{"NET_ADMIN", "NET_RAW"}, Drop: []corev1.Capability{"ALL"}},
			SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		},
		Resources: resources("10m", "16Mi", "64Mi"),
	}
}

// egressVolumes is the egress container's lock directory (its NoTokenVolume
// is the sidecars', always injected).
func egressVolumes() []corev1.Volume {
	return []corev1.Volume{{Name: XtablesVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{
		Medium: corev1.StorageMediumMemory, SizeLimit: ptr(resource.MustParse("1Mi"))}}}}
}

// egressPreamble defines the script's functions. A pod whose init runs
// again (a restarted sandbox) runs it again: the chain is created or
// emptied, and OUTPUT jumps to it once.
const egressPreamble = `# countersign-egress, written by countersign inject from its own flags only.
chain() { # $1: iptables or ip6tables
  $1 -N ` + egressChain + ` 2>/dev/null || $1 -F ` + egressChain + `
  $1 -C OUTPUT -m owner --uid-owner "$uid" -j ` + egressChain + ` 2>/dev/null ||
    $1 -I OUTPUT 1 -m owner --uid-owner "$uid" -j ` + egressChain + `
  # Envoy is on loopback: never closed.
  $1 -A ` + egressChain + ` -o lo -j RETURN
}
reject() { # $1: the tool, $2: a CIDR or a host name
  $1 -A ` + egressChain + ` -d "$2" -p tcp -j REJECT --reject-with tcp-reset
  $1 -A ` + egressChain + ` -d "$2" -j REJECT
}
reject_host() { # $1: a host name: every address it has now, in each family; at least one
  found=
  for t in iptables $v6; do
    if out=$($t -A ` + egressChain + ` -d "$1" -p tcp -j REJECT --reject-with tcp-reset 2>&1); then
      $t -A ` + egressChain + ` -d "$1" -j REJECT
      found=1
    else
      case $out in
      *"host/network"*"not found"*) echo "countersign-egress: $1: no address for $t" ;;
      *) echo "$out" >&2; return 1 ;;
      esac
    fi
  done
  if [ -z "$found" ]; then
    echo "countersign-egress: $1 resolves to no address (is DNS reachable?): the pod does not start with it open" >&2
    return 1
  fi
}
if [ -e /proc/net/if_inet6 ]; then
  v6=ip6tables
else
  v6=
  echo "countersign-egress: this kernel has no IPv6: nothing to close over IPv6"
fi
`

// egressScript is the init container's `sh -ec` script. It is built from
// validated operator settings alone (a UID, DNS names, canonical CIDRs),
// each single-quoted, never from anything of the pod's. Host names get a
// final dot, so no search domain of the pod's resolver applies.
func egressScript(e EgressConfig) string {
	var v4, v6 []string
	for _, s := range e.CIDRs {
		p := netip.MustParsePrefix(s).Masked()
		if p.Addr().Is4() {
			v4 = append(v4, p.String())
		} else {
			v6 = append(v6, p.String())
		}
	}
	var b strings.Builder
	b.WriteString(egressPreamble)
	fmt.Fprintf(&b, "uid=%s\n", shellQuote(strconv.FormatInt(e.AgentUID, 10)))
	if len(v4) > 0 || len(e.Hosts) > 0 {
		b.WriteString("chain iptables\n")
	}
	for _, c := range v4 {
		fmt.Fprintf(&b, "reject iptables %s\n", shellQuote(c))
	}
	if len(v6) > 0 || len(e.Hosts) > 0 {
		b.WriteString("if [ -n \"$v6\" ]; then\n  chain ip6tables\n")
		for _, c := range v6 {
			fmt.Fprintf(&b, "  reject ip6tables %s\n", shellQuote(c))
		}
		b.WriteString("fi\n")
	}
	for _, h := range e.Hosts {
		fmt.Fprintf(&b, "reject_host %s\n", shellQuote(h+"."))
	}
	b.WriteString("for t in iptables $v6; do $t -S " + egressChain + " 2>/dev/null || true; done\n")
	b.WriteString("echo \"countersign-egress: closed for UID $uid\"\n")
	return b.String()
}

// shellQuote single-quotes s for sh.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
