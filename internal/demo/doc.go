// Package demo is `countersign-dev dev`: Countersign with a private
// PostgreSQL, an in-process mock rail and the Envoy stand-in, seeded with a
// demo owner, agent and mandate. It links test support and so lives in its
// own binary (cmd/countersign-dev), never in the production one.
package demo
