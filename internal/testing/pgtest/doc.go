// Package pgtest gives tests a real, throwaway PostgreSQL.
//
// A test binary starts one private cluster in TestMain (or uses the server named by
// COUNTERSIGN_TEST_DATABASE_URL / DATABASE_URL), migrates a template database once,
// and hands every test a fresh clone of it:
//
//	func TestMain(m *testing.M) { pgtest.Main(m, migrate) } // migrate is a pgtest.Prepare
//
//	func TestSomething(t *testing.T) {
//		url := pgtest.NewDatabase(t) // dropped when the test ends
//		...
//	}
//
// Tests that must stop, start or crash the server take a Cluster of their own with
// NewCluster. Clusters listen on 127.0.0.1 only, trust every local connection, and keep
// fsync and synchronous_commit on: durability measured here is real durability.
//
// initdb refuses to run as root, so when the process is root the server binaries run as
// the "postgres" OS user on a directory that user owns; otherwise they run as the
// current user.
package pgtest
