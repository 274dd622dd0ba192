package server

import (
	"context"
	"log/slog"
	"time"

	"golang.org/x/mod/sumdb/note"

	"github.com/countersign/countersign/internal/ledger"
)

// sealer is what the sequencer needs of the ledger.
type sealer interface {
	Seal(ctx context.Context, signer note.Signer) (ledger.SealReport, error)
}

// runSequencer seals new audit records every interval until ctx ends, off
// every deciding transaction: it contends only with other sequencers (of
// this or another process sharing the ledger), on each account's log row.
// A failure is logged once per streak and retried at the next tick.
func runSequencer(ctx context.Context, store sealer, signer note.Signer, interval time.Duration, log *slog.Logger) {
	t := time.NewTicker(interval)
	defer t.Stop()
	failing := false
	for {
		rep, err := store.Seal(ctx, signer)
		switch {
		case err != nil && ctx.Err() == nil:
			if !failing {
				log.Warn("audit sealing failed; retrying every interval", "err", err, "interval", interval)
			}
			failing = true
		case err == nil:
			if failing {
				log.Info("audit sealing recovered")
			}
			failing = false
			if rep.Records > 0 {
				log.Debug("audit records sealed", "records", rep.Records, "accounts", rep.Accounts)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
