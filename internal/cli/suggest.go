package cli

import (
	"fmt"
	"strings"

	"github.com/agnivade/levenshtein"

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
		if !f.Hidden && (levenshtein.ComputeDistance(name, f.Name) <= 2 || (len(name) >= 3 && strings.Contains(f.Name, name))) {
			near = append(near, "--"+f.Name)
		}
	})
	if len(near) == 0 {
		return fmt.Errorf("%w (run '%s --help' for its flags)", err, cmd.CommandPath())
	}
	return fmt.Errorf("%w (did you mean %s?)", err, strings.Join(near, " or "))
}
