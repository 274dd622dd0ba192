// Package freeport finds a loopback TCP address for a process that a test
// starts later to bind (test support; never in a production binary).
//
// The port is drawn below the kernel's ephemeral range (Linux: 32768–60999),
// from which every outgoing connection and every ":0" listener of the tests
// running beside this one takes its port: a port picked there can be taken
// again before the started process binds it. Drawn at random and checked
// free, and never handed out twice by one process (two draws of one test
// once met: a few chances in ten thousand per pair, and a test draws
// several), a port here can only meet another test binary's.
package freeport

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
)

const (
	low   = 20000
	count = 12000 // up to 31999, below 32768
)

// given holds the ports this process has handed out: a test binds them
// later, so until then they look free.
var given = struct {
	sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{}}

// Addr returns "127.0.0.1:<port>" for a port nobody listens on now and
// that this process has not returned before.
func Addr() (string, error) {
	given.Lock()
	defer given.Unlock()
	for range 100 {
		port := low + rand.IntN(count) //nolint:gosec // a test port, not a secret
		if given.ports[port] {
			continue
		}
		addr := fmt.Sprintf("127.0.0.1:%d", port)
		var lc net.ListenConfig
		l, err := lc.Listen(context.Background(), "tcp", addr)
		if err != nil {
			continue // in use: draw again
		}
		if err := l.Close(); err != nil {
			return "", err
		}
		given.ports[port] = true
		return addr, nil
	}
	return "", errors.New("freeport: no free port below the ephemeral range after 100 draws")
}
