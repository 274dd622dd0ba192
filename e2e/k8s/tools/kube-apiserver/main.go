// Command kube-apiserver is the upstream kube-apiserver (k8s.io/kubernetes
// cmd/kube-apiserver), built from its published module for the end-to-end
// test of `countersign inject` against a real API server.
package main

import (
	"os"
	_ "time/tzdata" // for timeZone support in CronJob, as upstream

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"          // JSON log format, as upstream
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go metrics, as upstream
	_ "k8s.io/component-base/metrics/prometheus/version"  // version metric, as upstream
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
)

func main() {
	os.Exit(cli.Run(app.NewAPIServerCommand()))
}
