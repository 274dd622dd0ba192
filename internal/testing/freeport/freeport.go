// Package freeport finds a loopback TCP address for a process that a test
// starts later to bind (test support; never in a production binary).
//
// The port is drawn below the kernel's ephemeral range (Linux: 32768–60999),
// from which every outgoing connection and every ":0" listener of the tests
// running beside this one takes its port: a port picked there can be taken
// again before the started process binds it. Drawn at random and checked
// free, a port here can only meet another Addr's, a few chances in ten
// thousand per pair.
package freeport

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
)

const (
	low   = 20000
	count = 12000 // up to 31999, below 32768
)

// Addr returns "127.0.0.1:<port>" for a port nobody listens on now.
func Addr() (string, error) {
	for range 100 {
		addr := fmt.Sprintf("127.0.0.1:%d", low+rand.IntN(count)) //nolint:gosec // a test port, not a secret
		var lc net.ListenConfig
		l, err := lc.Listen(context.Background(), "tcp", addr)
		if err != nil {
			continue // in use: draw again
		}
		if err := l.Close(); err != nil {
			return "", err
		}
		return addr, nil
	}
	return "", errors.New("freeport: no free port below the ephemeral range after 100 draws")
}
