package pgtest_test

import (
	"context"
	"log"

	"github.com/countersign/countersign/internal/testing/pgtest"
)

// A long-lived cluster for a developer, kept under ./.countersign/pg: the first run
// initialises it, later runs reuse its data.
func ExampleStartCluster() {
	ctx := context.Background()
	c, err := pgtest.StartCluster(ctx, pgtest.ClusterOptions{DataDir: ".countersign/pg", Port: 54329})
	if err != nil {
		log.Fatal(err)
	}
	defer func() {
		if err := c.Close(); err != nil { // stops the server; a caller's DataDir is kept
			log.Print(err)
		}
	}()
	if err := c.CreateDatabase(ctx, "countersign", ""); err != nil {
		log.Print(err) // already exists on later runs
	}
	log.Println("ledger at", c.URL("countersign"))
}
