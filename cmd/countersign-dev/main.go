// Command countersign-dev is the countersign command plus `dev`, the demo
// that `make run` starts. It links the mock rail, the Envoy stand-in and the
// PostgreSQL launcher, which the production binary (cmd/countersign) must
// not; nothing here is for production.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/countersign/countersign/internal/cli"
	"github.com/countersign/countersign/internal/demo"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Execute(ctx, os.Args[1:], demo.NewCommand())
	stop()
	os.Exit(code)
}
