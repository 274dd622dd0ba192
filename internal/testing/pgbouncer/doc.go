// Package pgbouncer starts a real, throwaway PgBouncer in transaction pooling
// mode in front of a PostgreSQL server, for tests of the ledger behind a
// pooler:
//
//	b := pgbouncer.New(t, pgtest.NewDatabase(t), pgbouncer.Options{})
//	url := b.URL(databaseURL) // the same database, through the pooler
//
// Its configuration and auth file live in a temporary directory of their own.
// PgBouncer refuses to run as root, so when the process is root it runs as
// the "postgres" OS user (as pgtest's servers do). It listens on 127.0.0.1 on
// a free port, trusts the local clients it lists, forwards every database
// name to the server, and is stopped when the test ends.
//
// A missing binary is an error naming the install command, never a skip: a
// test that claims to run through PgBouncer must.
package pgbouncer
