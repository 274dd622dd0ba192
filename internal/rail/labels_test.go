package rail

import (
	"slices"
	"testing"
)

func TestCanonicalLabels(t *testing.T) {
	for _, tc := range []struct {
		name   string
		labels map[string]Label
		want   string
	}{
		{"none", nil, "{}"},
		{"empty", map[string]Label{}, "{}"},
		{"sorted by member", map[string]Label{"reason": {Value: "duplicate"}, "metadata[ticket]": {Value: "T-77", FreeText: true}},
			`{"metadata[ticket]":"T-77","reason":"duplicate"}`},
		{"free text flag is not part of it", map[string]Label{"reason": {Value: "duplicate", FreeText: true}}, `{"reason":"duplicate"}`},
		{"escapes", map[string]Label{"notes.a": {Value: "<\"\u2028\">"}}, `{"notes.a":"<\"` + "\u2028" + `\">"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := CanonicalLabels(tc.labels); got != tc.want {
				t.Errorf("CanonicalLabels = %s, want %s", got, tc.want)
			}
		})
	}
	if LabelsDigest("{}") != "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a" {
		t.Errorf("LabelsDigest({}) = %s", LabelsDigest("{}"))
	}
}

func TestFreeTextMembers(t *testing.T) {
	got := FreeTextMembers(map[string]Label{"reason": {Value: "duplicate"}, "metadata[b]": {Value: "x", FreeText: true}, "description": {Value: "y", FreeText: true}})
	if want := []string{"description", "metadata[b]"}; !slices.Equal(got, want) {
		t.Errorf("FreeTextMembers = %v, want %v", got, want)
	}
}
