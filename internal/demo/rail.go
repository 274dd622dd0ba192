package demo

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/countersign/countersign/internal/cli"
	"github.com/countersign/countersign/internal/rails"
	"github.com/countersign/countersign/internal/testing/mockrail"
)

// The rail accounts `countersign dev` configures against its mock rail.
const (
	devStripeAccount   = "acct_dev_stripe"
	devRazorpayAccount = "acct_dev_razorpay"
	stripeHost         = "api.stripe.com"
	razorpayHost       = "api.razorpay.com"
)

// startDevRail runs the mock rail in-process with the run's payments (it
// keeps nothing between runs), writes its keys where a mounted secret would
// be, and returns the rail accounts that point at it.
func startDevRail(ctx context.Context, keyDir, addr string, payments []mockrail.Payment) (*rails.Registry, string, func(), error) {
	mock, err := mockrail.New(mockrail.WithPayments(payments...))
	if err != nil {
		return nil, "", nil, err
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, "", nil, fmt.Errorf("dev: mock rail: %w", err)
	}
	hs := &http.Server{Handler: mock, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			fmt.Fprintln(os.Stderr, "dev: mock rail:", err)
		}
	}()
	stop := func() {
		mock.Close()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = hs.Shutdown(sctx)
	}
	url := "http://" + ln.Addr().String()
	if err := os.MkdirAll(keyDir, 0o700); err != nil {
		stop()
		return nil, "", nil, err
	}
	write := func(name, key string) (string, error) {
		p := filepath.Join(keyDir, name)
		return p, os.WriteFile(p, []byte(key), 0o600)
	}
	sk, err := write("stripe.key", mockrail.DefaultStripeKey)
	if err != nil {
		stop()
		return nil, "", nil, err
	}
	rk, err := write("razorpay.key", mockrail.DefaultRazorpayKeyID+":"+mockrail.DefaultRazorpayKeySecret)
	if err != nil {
		stop()
		return nil, "", nil, err
	}
	rs, err := rails.New(rails.File{Rails: []rails.AccountConfig{
		{Account: devStripeAccount, Rail: "stripe", Hosts: []string{stripeHost}, BaseURL: url, KeyFile: sk},
		{Account: devRazorpayAccount, Rail: "razorpay", Hosts: []string{razorpayHost}, BaseURL: url, KeyFile: rk},
	}}, cli.Adapters, nil)
	if err != nil {
		stop()
		return nil, "", nil, err
	}
	return rs, url, stop, nil
}
