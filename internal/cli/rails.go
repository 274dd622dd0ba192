package cli

import (
	"fmt"
	"os"

	"github.com/countersign/countersign/internal/config"
	"github.com/countersign/countersign/internal/rail"
	"github.com/countersign/countersign/internal/rail/razorpay"
	"github.com/countersign/countersign/internal/rail/stripe"
	"github.com/countersign/countersign/internal/rails"
	"github.com/countersign/countersign/internal/sik"
)

// Adapters are the rails this binary speaks.
var Adapters = rails.Adapters{
	sik.RailStripe:   func() rail.Adapter { return stripe.New() },
	sik.RailRazorpay: func() rail.Adapter { return razorpay.New() },
}

// loadRails loads the configured rail accounts; without a rails file the
// registry is empty and every payment call is refused. In the agent's pod
// (in-agent-pod) every rail URL must be https, loopback included.
func loadRails(cfg config.Config) (*rails.Registry, error) {
	if cfg.RailsFile == "" {
		return nil, nil
	}
	var opts []rails.Option
	if cfg.InAgentPod {
		opts = append(opts, rails.InAgentPod())
	}
	rs, err := rails.Load(cfg.RailsFile, Adapters, nil, opts...)
	if err != nil {
		return nil, fmt.Errorf("rails-file (%s): %w", config.EnvName("rails-file"), err)
	}
	return rs, nil
}

// leaseOwner names this process in leases.
func leaseOwner(cfg config.Config) string {
	if cfg.LeaseOwner != "" {
		return cfg.LeaseOwner
	}
	host, _ := os.Hostname()
	return fmt.Sprintf("%s:%d", host, os.Getpid())
}
