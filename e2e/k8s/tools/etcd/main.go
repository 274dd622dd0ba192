// Command etcd is the upstream etcd server (go.etcd.io/etcd/server/v3
// etcdmain), built from its published module for the end-to-end test of
// `countersign inject` against a real kube-apiserver.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
