package cli

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// suggestFlag is the root's flag error function: an unknown --flag gets the
// nearest flags the command has ("did you mean --grpc-addr?"), as cobra
// already does for mistyped subcommands.
func suggestFlag(cmd *cobra.Command, err error) error {
	msg := err.Error()
	name, ok := strings.CutPrefix(msg, "unknown flag: --")
	if !ok {
		return fmt.Errorf("%w (run '%s --help' for usage)", err, cmd.CommandPath())
	}
	name, _, _ = strings.Cut(name, "=")
	var near []string
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if !f.Hidden && (editDistance(name, f.Name) <= 2 || (len(name) >= 3 && strings.Contains(f.Name, name))) {
			near = append(near, "--"+f.Name)
		}
	})
	if len(near) == 0 {
		return fmt.Errorf("%w (run '%s --help' for its flags)", err, cmd.CommandPath())
	}
	return fmt.Errorf("%w (did you mean %s?)", err, strings.Join(near, " or "))
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
