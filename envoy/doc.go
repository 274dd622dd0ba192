// Package envoy holds Countersign's shipped Envoy and Istio configurations
// (egress.yaml, istio/) and the tests that prove them.
//
// No Envoy binary runs on the machines this project is built on, so the
// configurations are checked the way Envoy would check them as far as the
// API goes: each bootstrap is parsed strictly into go-control-plane's
// Bootstrap (unknown fields and enum values fail), validated with its
// generated rules, and every typed Any inside it (filter configs, per-route
// configs, transport sockets, protocol options, access loggers) is resolved,
// unpacked and validated in turn, recursively — ValidateAll alone stops at
// an Any. On top of that the tests assert the contract Countersign's
// ext_authz and ext_proc servers rely on (fail closed, the filter order,
// buffered bodies, the forwarded metadata namespace, a rail account on
// every rail route, TLS to every rail).
//
// The package has no code outside its tests.
package envoy
