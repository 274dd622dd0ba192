package railtest

import "strings"

// tagged writes s in Unicode tag characters (U+E0000 + ASCII), which
// browsers draw as nothing.
func tagged(s string) string {
	var b strings.Builder
	for _, c := range s {
		b.WriteRune(0xE0000 + c)
	}
	return b.String()
}

// HiddenText holds, by kind, label text an owner would not see as it is
// written: each hides "4242…" or changes what follows. Every rail's
// parser must refuse each in a label (rail.AddLabel).
var HiddenText = map[string]string{
	"tag characters":            "T-77" + tagged("4242424242424242"),
	"variation selectors":       "T-77\U000E0104\U000E0102\U000E0104\U000E0102",
	"soft hyphen":               "T-7\u00ad7",
	"interlinear annotation":    "T-77\ufff94242\ufffa\ufffb",
	"hangul filler":             "T-77\u3164\u3164",
	"paragraph separator":       "T-77\u20294242",
	"mongolian vowel separator": "T-77\u180e",
	"right-to-left override":    "T-77\u202e2424",
	"zero-width space":          "T-\u200b77",
	"private use":               "T-77\ue000",
	"escape":                    "T-77\x1b[8m4242",
	"braille blank":             "T-77\u2800\u2800",
}

// ShownText holds label text that reads as it is written, which the
// parsers must keep accepting.
var ShownText = map[string]string{
	"plain":             "T-77",
	"accents and emoji": "remboursé 🙂",
	"no-break space":    "T-77\u00a0ok",
	"line feed and tab": "line one\n\tline two",
}
