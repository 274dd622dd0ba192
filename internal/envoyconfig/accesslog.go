package envoyconfig

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	accesslogv3 "github.com/envoyproxy/go-control-plane/envoy/config/accesslog/v3"
	"google.golang.org/protobuf/encoding/protojson"
)

// secretHeaders are headers no access log may name: the agent's credential,
// or the rail key Countersign puts in its place.
var secretHeaders = []string{"authorization", "cookie", "x-api-key"}

// envoyHeader finds the x-envoy-* header names an access log mentions.
var envoyHeader = regexp.MustCompile(`\bx-envoy-[a-z0-9_-]*`)

// AccessLogFaults lists what is wrong with one access log of a shipped
// config: it names a credential header, or it reads an x-envoy-* header.
// The whole log is read, its filter as well as its format: a filter on a
// header the agent sets lets the agent choose which lines are written.
//
// Every x-envoy-* request header is the agent's to set. Envoy strips only
// the controls it would obey from a request it does not take for internal
// (conn_manager_utility.cc, cleanInternalHeaders: retries, timeouts,
// x-envoy-original-url, …), not x-envoy-original-path, and sets
// x-envoy-original-path itself only where a route rewrites the path and
// the router does not suppress its headers (config_impl.cc,
// RouteEntryImplBase::finalizePathHeader; router.cc passes
// !suppress_envoy_headers_). No route rewrites a path here and the router
// suppresses its headers, so a log of x-envoy-original-path shows only the
// path the agent claims, not the one Envoy sent; a request Countersign
// refuses for that very header would be logged under the forged path. The
// path Envoy routed is %REQ(:PATH)%.
func AccessLogFaults(l *accesslogv3.AccessLog) ([]string, error) {
	js, err := protojson.Marshal(l)
	if err != nil {
		return nil, err
	}
	low := strings.ToLower(string(js))
	var out []string
	for _, h := range secretHeaders {
		if strings.Contains(low, h) {
			out = append(out, fmt.Sprintf("names %q: credentials must never be logged", h))
		}
	}
	if hs := slices.Compact(slices.Sorted(slices.Values(envoyHeader.FindAllString(low, -1)))); len(hs) > 0 {
		out = append(out, fmt.Sprintf("reads %s: an x-envoy-* request header is the agent's to set, "+
			"so the line would show what the agent claims (log the path as %%REQ(:PATH)%%, which Envoy routed)", strings.Join(hs, ", ")))
	}
	return out, nil
}
