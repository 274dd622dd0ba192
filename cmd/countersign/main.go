// Command countersign is the Countersign sidecar and its operator tools.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/countersign/countersign/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Execute(ctx, os.Args[1:])
	stop()
	os.Exit(code)
}
