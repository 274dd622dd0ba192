// Package e2e holds whole-process tests: they build the real binaries, start
// them against a real PostgreSQL, and speak to them over the network the way
// Envoy, an agent and an owner would.
package e2e
