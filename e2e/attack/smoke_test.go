package attack

import (
	"context"
	"fmt"
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
				start := time.Now()
				r := st.RunScenario(ctx, s, p)
				cancel()
				line := fmt.Sprintf("%s %-40s %-9s %5dms err=%v out=%v leak=%v honest=%v dup=%d |", mode, s.Name, p, time.Since(start).Milliseconds(), r.Err, r.Judgement.MoneyOut, r.Judgement.Leaked, r.Judgement.HonestMet, r.Judgement.ExactlyOnceViolations)
				for _, x := range r.Exchanges {
					b := x.Body
					if len(b) > 90 {
						b = b[:90]
					}
					line += fmt.Sprintf(" [%d.%d.%d %s %d %s %s]", x.Step, x.Send, x.Attempt, x.Role[:3], x.Status, x.Verdict, b)
				}
				if os.Getenv("ATTACK_VERBOSE") == "" && len(line) > 600 {
					line = line[:600]
				}
				fmt.Println(line)
			}
		}
	}
}
