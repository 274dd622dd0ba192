// Package k8s holds the end-to-end test of `countersign inject` against a
// real kube-apiserver and etcd (`make e2e-k8s`, build tag k8s). The servers
// are built from their published modules by the wrapper modules under
// tools/ (scripts/k8s-tools.sh), which the root module never sees.
package k8s
