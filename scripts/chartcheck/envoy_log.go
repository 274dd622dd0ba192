package main

import (
	"slices"
	"strings"
)

// safeEnvoyLogLevels are the levels at which Envoy logs no request's
// headers. At debug its router logs every request it sends upstream, each
// header with its value (envoyproxy/envoy source/common/router/router.cc,
// Filter::decodeHeaders: ENVOY_STREAM_LOG(debug, "router decoding
// headers:\n{}", *callbacks_, headers); source/common/http/header_map_impl.cc,
// dumpState, prints values verbatim): after ext_authz, that is the
// authorization header with the rail key, in `kubectl logs`. At trace
// ext_authz also logs the headers it sets (ext_authz.cc, Filter::onComplete),
// and the connection manager logs the agent's own at debug. Envoy's default
// is info.
var safeEnvoyLogLevels = []string{"info", "warning", "warn", "error", "critical", "off"}

// checkEnvoyLogLevel: the Envoy command line (command and args) sets no
// log level, for all components (-l, --log-level) or some
// (--component-log-level router:debug,…), below info.
func checkEnvoyLogLevel(r *result, where string, argv []string) {
	for i := 0; i < len(argv); i++ {
		a := argv[i]
		name, value, inline := strings.Cut(a, "=")
		switch {
		case name == "-l" || name == "--log-level" || name == "--component-log-level":
		case strings.HasPrefix(a, "-l") && !strings.HasPrefix(a, "--"):
			// -ldebug, as a getopt-style parser would read it.
			name, value, inline = "-l", strings.TrimPrefix(a[2:], "="), true
		default:
			continue
		}
		if !inline {
			if i+1 >= len(argv) {
				r.ok(invEnvoyLog, false, "%s: %s without a value", where, name)
				return
			}
			i++
			value = argv[i]
		}
		if name != "--component-log-level" {
			r.ok(invEnvoyLog, slices.Contains(safeEnvoyLogLevels, value),
				"%s: envoy %s %q: want one of %q; at debug Envoy's router logs every request's headers, the rail key ext_authz set among them", where, name, value, safeEnvoyLogLevels)
			continue
		}
		for _, cl := range strings.Split(value, ",") {
			comp, level, _ := strings.Cut(cl, ":")
			r.ok(invEnvoyLog, slices.Contains(safeEnvoyLogLevels, level),
				"%s: envoy --component-log-level %s:%s: want one of %q for every component; at debug or trace router, http, ext_authz and others log request headers, the rail key among them", where, comp, level, safeEnvoyLogLevels)
		}
	}
}
