package rail

import (
	"strings"
	"testing"

	"github.com/countersign/countersign/internal/sik"
)

func TestKeySet(t *testing.T) {
	for _, tc := range []struct {
		name    string
		keys    []string
		refused string // the key refused, "" for none
	}{
		{"distinct", []string{"ticket", "order", "ticket_2"}, ""},
		{"the stamp key exactly", []string{"ticket", sik.StampKey}, ""},
		{"dotless i is not i", []string{"ticket", "tıcket"}, ""},
		{"case pair", []string{"ticket", "TICKET"}, "TICKET"},
		{"mixed case pair", []string{"Order_ID", "order_id"}, "order_id"},
		{"twice", []string{"ticket", "ticket"}, "ticket"},
		{"stamp key upper case", []string{sik.StampKey, "COUNTERSIGN_SIK"}, "COUNTERSIGN_SIK"},
		{"stamp key variant alone", []string{"Countersign_Sik"}, "Countersign_Sik"},
		{"stamp key with long s", []string{"countersign_\u017fik"}, "countersign_\u017fik"},
		{"kelvin sign", []string{"k", "\u212a"}, "\u212a"},
		{"long s", []string{"s", "\u017f"}, "\u017f"},
		{"greek sigma forms", []string{"\u03c3", "\u03c2"}, "\u03c2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var s KeySet
			refused := ""
			for _, k := range tc.keys {
				if err := s.Add(k); err != nil {
					refused = k
					if !strings.Contains(err.Error(), "\""+k+"\"") {
						t.Errorf("the error %q does not name %q", err, k)
					}
					break
				}
			}
			if refused != tc.refused {
				t.Fatalf("refused %q, want %q", refused, tc.refused)
			}
		})
	}
}

// FuzzKeySet: Add refuses a key exactly when strings.EqualFold says it
// equals one added before, or the stamp key without being it.
func FuzzKeySet(f *testing.F) {
	for _, s := range []string{"ticket\x00TICKET", "k\x00\u212a", "COUNTERSIGN_SIK", "countersign_sik\x00a", "s\x00\u017f", "\u03c3\x00\u03a3\x00\u03c2"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, joined string) {
		var s KeySet
		var added []string
		for _, k := range strings.Split(joined, "\x00") {
			want := k != sik.StampKey && strings.EqualFold(k, sik.StampKey)
			for _, prev := range added {
				want = want || strings.EqualFold(k, prev)
			}
			if err := s.Add(k); (err != nil) != want {
				t.Fatalf("Add(%q) after %q = %v; EqualFold says refused=%v", k, added, err, want)
			} else if err == nil {
				added = append(added, k)
			}
		}
	})
}
