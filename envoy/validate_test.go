package envoy

import (
	"os"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"

	"github.com/countersign/countersign/internal/envoyconfig"
)

// loadBootstrap reads and parses an Envoy bootstrap file.
func loadBootstrap(path string) (*bootstrapv3.Bootstrap, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return parseBootstrap(raw)
}

// parseBootstrap and validateDeep are envoyconfig's, which
// scripts/chartcheck shares.
var (
	parseBootstrap = envoyconfig.ParseBootstrap
	validateDeep   = envoyconfig.ValidateDeep
)
