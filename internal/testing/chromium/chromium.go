// Package chromium starts the Chromium the browser tests drive.
package chromium

import (
	"context"
	"os"
	"os/exec"
	"testing"

	"github.com/chromedp/chromedp"
)

// Path finds Chromium; without one the test skips, unless
// COUNTERSIGN_REQUIRE_CHROMIUM is set (as CI sets it, having installed it).
func Path(t testing.TB) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("COUNTERSIGN_REQUIRE_CHROMIUM") != "" {
		t.Fatal("COUNTERSIGN_REQUIRE_CHROMIUM is set and no chromium is on PATH")
	}
	t.Skip("no chromium on PATH (apt-get install chromium); CI installs it and sets COUNTERSIGN_REQUIRE_CHROMIUM")
	return ""
}

// Context starts the Chromium at path, headless, and returns a context
// that drives its first tab and the function that stops it.
func Context(t testing.TB, path string) (context.Context, context.CancelFunc) {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.NoSandbox, // tests run as root in CI; Chromium's sandbox refuses root
		chromedp.DisableGPU,
		chromedp.WindowSize(1280, 900),
	)
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelCtx := chromedp.NewContext(alloc, chromedp.WithLogf(t.Logf))
	if err := chromedp.Run(ctx); err != nil {
		cancelCtx()
		cancelAlloc()
		t.Fatalf("start chromium: %v", err)
	}
	return ctx, func() { cancelCtx(); cancelAlloc() }
}
