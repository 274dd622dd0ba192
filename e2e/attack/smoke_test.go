package attack

import (
	"context"
	"os"
	"testing"
	"time"
)

func TestOne(t *testing.T) {
	all, err := LoadAll(os.DirFS("."), "scenarios")
	if err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{"direct", "gated"} {
		st := stack(t, mode)
		for _, s := range all {
			for _, p := range Policies {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				r := st.RunScenario(ctx, s, p)
				cancel()
				t.Logf("%s %s %s: err=%v judgement=%+v", mode, s.Name, p, r.Err, r.Judgement)
				for _, x := range r.Exchanges {
					t.Logf("   %+v", x)
				}
			}
		}
	}
}
