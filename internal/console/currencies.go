package console

import (
	"encoding/json"
	"sync"

	"github.com/countersign/countersign/internal/money"
)

// currenciesAsset is the path, under /console/assets/, of the table the
// page formats minor units with: internal/money's own, so an amount reads
// the same in the console as in the refusal the agent got.
const currenciesAsset = "currencies.json"

var currencies = sync.OnceValue(func() []byte {
	iso, departures := money.Exponents()
	b, err := json.Marshal(struct {
		ISO4217 map[string]int `json:"iso4217"`
		Stripe  map[string]int `json:"stripe"`
	}{iso, departures["stripe"]})
	if err != nil {
		panic(err) // maps of strings to ints always marshal
	}
	return b
})
