package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
	"github.com/countersign/countersign/internal/config"
	"github.com/countersign/countersign/internal/ledger"
	"github.com/countersign/countersign/internal/mandate"
)

func newMandate() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "mandate",
		Short: "Draft, check, store, show and revoke mandates",
		Long: "A mandate is an owner's grant of spending authority to one agent on one rail account, written in " +
			"YAML. It is identified by the SHA-256 of its canonical form, never changes once applied (a new policy " +
			"is a new mandate), and can be revoked one way.",
	}
	cmd.AddCommand(newMandateInit(), newMandateLint(), newMandateApply(), newMandateShow(), newMandateRevoke())
	return cmd
}

// printProblems writes problems as FILE:LINE:COL: field: message.
func printProblems(w io.Writer, file string, problems []mandate.Problem) {
	for _, p := range problems {
		fmt.Fprintf(w, "%s:%d:%d: %s: %s\n", file, p.Line, p.Column, p.FieldName(), p.Message)
	}
}

func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return strconv.Itoa(n) + " " + word + "s"
}

func newMandateLint() *cobra.Command {
	return &cobra.Command{
		Use:   "lint FILE...",
		Short: "Check mandate files and print each problem as FILE:LINE:COL: field: message",
		Long: "Lint parses and validates each mandate file without touching the ledger. It prints every problem " +
			"with its line and column and exits 1 if there is any; for a valid file it prints the hash the " +
			"mandate will have.",
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			out := cmd.OutOrStdout()
			total, bad := 0, 0
			for _, file := range args {
				data, err := os.ReadFile(file)
				if err != nil {
					return err
				}
				m, err := mandate.Parse(data)
				var perr *mandate.Error
				switch {
				case errors.As(err, &perr):
					printProblems(out, file, perr.Problems)
					total += len(perr.Problems)
					bad++
					continue
				case err != nil:
					return err
				}
				hash, err := mandate.Hash(m)
				if err != nil {
					return err
				}
				fmt.Fprintf(out, "%s: ok, mandate %s\n", file, hash)
			}
			if total > 0 {
				return fmt.Errorf("%s in %s", plural(total, "problem"), plural(bad, "file"))
			}
			return nil
		},
	}
}

// openLedger loads cmd's database configuration and opens the ledger.
func openLedger(cmd *cobra.Command, cfg *config.Config) (*ledger.Store, error) {
	if _, err := Load(cmd, cfg, config.Config.ValidateDatabase); err != nil {
		return nil, err
	}
	return ledger.Open(cmd.Context(), cfg.DatabaseURL, ledger.Options{MaxConns: 2, Pooler: cfg.DBPooler})
}

func newMandateApply() *cobra.Command {
	cfg := config.Defaults()
	cmd := &cobra.Command{
		Use:   "apply FILE",
		Short: "Validate a mandate file and store it; print its hash",
		Long: "Apply parses and validates the mandate, then stores it for its agent (which must exist and be " +
			"active). It prints the mandate's hash. Applying the same policy again is not an error: it prints " +
			"the hash and \"already applied\". A changed file is a new mandate; the one it replaces stays " +
			"active until it is revoked.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			file := args[0]
			data, err := os.ReadFile(file)
			if err != nil {
				return err
			}
			m, err := mandate.Parse(data)
			var perr *mandate.Error
			if errors.As(err, &perr) {
				printProblems(cmd.ErrOrStderr(), file, perr.Problems)
				return fmt.Errorf("%s: %s; nothing applied", file, plural(len(perr.Problems), "problem"))
			}
			if err != nil {
				return err
			}
			now := time.Now()
			if until := m.GetValidUntil().AsTime(); !until.After(now) {
				return fmt.Errorf("%s: the mandate expired at %s; nothing applied", file, until.Format(time.RFC3339))
			}
			rec, err := mandate.Record(m)
			if err != nil {
				return err
			}
			store, err := openLedger(cmd, &cfg)
			if err != nil {
				return err
			}
			defer store.Close()
			ctx := cmd.Context()
			created, err := store.CreateMandate(ctx, rec)
			if errors.Is(err, ledger.ErrNotFound) {
				return fmt.Errorf("agent %s does not exist or is revoked; create the agent first: %w", rec.AgentID, err)
			}
			if errors.Is(err, ledger.ErrNotHeld) {
				return fmt.Errorf("the owner of agent %s does not hold rail account %s; grant it first with "+
					"`countersign owner grant-account %s OWNER_ID`: %w", rec.AgentID, rec.RailAccount, rec.RailAccount, err)
			}
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if created {
				fmt.Fprintln(out, rec.Hash)
			} else {
				existing, err := store.GetMandate(ctx, rec.Hash)
				if err != nil {
					return err
				}
				if existing.RevokedAt != nil {
					return fmt.Errorf("mandate %s was revoked at %s (%s) and stays revoked; "+
						"a mandate to the same effect must differ from it, e.g. in purpose or validity",
						rec.Hash, existing.RevokedAt.UTC().Format(time.RFC3339), existing.RevokeReason)
				}
				fmt.Fprintf(out, "%s already applied at %s\n", rec.Hash, existing.CreatedAt.UTC().Format(time.RFC3339))
			}
			return noteOtherActive(ctx, cmd.ErrOrStderr(), store, rec, now)
		},
	}
	cfg.BindDatabase(cmd.Flags())
	return cmd
}

// noteOtherActive tells the owner when another mandate also covers the
// agent and rail account: the newest one applies, an older one comes back
// into force if the newer is revoked, and what carries over (windows count
// across the agent's mandates on the account; budgets do not).
func noteOtherActive(ctx context.Context, w io.Writer, store *ledger.Store, rec ledger.MandateRecord, now time.Time) error {
	all, err := store.ListMandates(ctx, "", rec.AgentID)
	if err != nil {
		return err
	}
	for _, o := range all {
		if o.Hash != rec.Hash && o.RailAccount == rec.RailAccount && o.RevokedAt == nil && o.ValidUntil.After(now) {
			fmt.Fprintf(w, "note: mandate %s also covers agent %s on %s until %s; the newest valid mandate applies, "+
				"so revoke the old one if this one replaces it. This one's windows count the agent's actions under both; "+
				"its budgets start at zero\n", o.Hash, rec.AgentID, rec.RailAccount, o.ValidUntil.UTC().Format(time.RFC3339))
		}
	}
	return nil
}

// mandateState names where a stored mandate is in its life at now.
func mandateState(r ledger.MandateRecord, now time.Time) string {
	switch {
	case r.RevokedAt != nil:
		return "revoked"
	case now.Before(r.ValidFrom):
		return "not yet valid"
	case !now.Before(r.ValidUntil):
		return "expired"
	}
	return "active"
}

func newMandateShow() *cobra.Command {
	cfg := config.Defaults()
	var agentID, ownerID string
	cmd := &cobra.Command{
		Use:   "show (HASH | --agent ID | --owner ID)",
		Short: "Print a stored mandate as YAML with its state, or list an agent's or owner's mandates",
		Long: "Show HASH prints the stored mandate as YAML, preceded by comments giving its state (active, " +
			"not yet valid, expired or revoked). The YAML applies again to the same hash. With --agent or " +
			"--owner it lists mandates, newest first.",
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			listing := agentID != "" || ownerID != ""
			if (len(args) == 1) == listing {
				return errors.New("give either a mandate HASH or --agent/--owner")
			}
			if len(args) == 1 && !mandate.ValidHash(args[0]) {
				return fmt.Errorf("%q is not a mandate hash (64 lower-case hex digits)", args[0])
			}
			store, err := openLedger(cmd, &cfg)
			if err != nil {
				return err
			}
			defer store.Close()
			now := time.Now()
			out := cmd.OutOrStdout()
			if listing {
				list, err := store.ListMandates(cmd.Context(), ownerID, agentID)
				if err != nil {
					return err
				}
				if len(list) == 0 {
					fmt.Fprintln(out, "no mandates")
					return nil
				}
				tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "HASH\tSTATE\tAGENT\tRAIL ACCOUNT\tMODE\tVALID FROM\tVALID UNTIL\tCREATED\tLIMITS")
				for _, r := range list {
					limits := "?"
					if m, err := mandate.FromCanonical(r.Canonical); err == nil {
						limits = mandateLimits(m)
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Hash, mandateState(r, now), r.AgentID, r.RailAccount, r.Mode,
						r.ValidFrom.UTC().Format(time.RFC3339), r.ValidUntil.UTC().Format(time.RFC3339), r.CreatedAt.UTC().Format(time.RFC3339), limits)
				}
				return tw.Flush()
			}
			rec, err := store.GetMandate(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			m, err := mandate.FromCanonical(rec.Canonical)
			if err != nil {
				return fmt.Errorf("mandate %s: %w", rec.Hash, err)
			}
			if got := mandate.HashCanonical(rec.Canonical); got != rec.Hash {
				return fmt.Errorf("mandate %s: stored bytes hash to %s", rec.Hash, got)
			}
			y, err := mandate.ToYAML(m)
			if err != nil {
				return err
			}
			fmt.Fprintf(out, "# mandate %s\n", rec.Hash)
			fmt.Fprintf(out, "# state: %s (at %s)\n", mandateState(rec, now), now.UTC().Format(time.RFC3339))
			fmt.Fprintf(out, "# owner: %s\n", rec.OwnerID)
			fmt.Fprintf(out, "# created: %s\n", rec.CreatedAt.UTC().Format(time.RFC3339))
			fmt.Fprintf(out, "# limits: %s (the YAML below is in minor units)\n", mandateLimits(m))
			if rec.RevokedAt != nil {
				fmt.Fprintf(out, "# revoked: %s: %s\n", rec.RevokedAt.UTC().Format(time.RFC3339), strings.Join(strings.Fields(rec.RevokeReason), " "))
			}
			_, err = out.Write(y)
			return err
		},
	}
	cmd.Flags().StringVar(&agentID, "agent", "", "list the mandates of this agent")
	cmd.Flags().StringVar(&ownerID, "owner", "", "list the mandates of this owner")
	cfg.BindDatabase(cmd.Flags())
	return cmd
}

func newMandateRevoke() *cobra.Command {
	cfg := config.Defaults()
	var reason string
	cmd := &cobra.Command{
		Use:   "revoke HASH --reason TEXT",
		Short: "Revoke a mandate for good",
		Long: "Revoke ends a mandate's authority at once and for good: decisions under it block from then on, " +
			"and applying the same mandate again does not bring it back. The reason is recorded.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			hash := args[0]
			if !mandate.ValidHash(hash) {
				return fmt.Errorf("%q is not a mandate hash (64 lower-case hex digits)", hash)
			}
			if strings.TrimSpace(reason) == "" {
				return errors.New("--reason is required: say why the mandate is revoked")
			}
			store, err := openLedger(cmd, &cfg)
			if err != nil {
				return err
			}
			defer store.Close()
			revoked, err := store.RevokeMandate(cmd.Context(), hash, reason)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if revoked {
				fmt.Fprintf(out, "revoked %s\n", hash)
				return nil
			}
			rec, err := store.GetMandate(cmd.Context(), hash)
			if err != nil {
				return err
			}
			fmt.Fprintf(out, "%s was already revoked at %s: %s\n", hash, rec.RevokedAt.UTC().Format(time.RFC3339), rec.RevokeReason)
			return nil
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why the mandate is revoked (required; recorded)")
	cfg.BindDatabase(cmd.Flags())
	return cmd
}

func newMandateInit() *cobra.Command {
	var out string
	var force bool
	cmd := &cobra.Command{
		Use:   "init --out FILE",
		Short: "Draft a mandate by answering questions; writes YAML for a person to review",
		Long: "Init asks what the agent may do, the most it may move in one action, the daily cap, the currency, " +
			"the rail account and agent, and who approves exceptions, then writes a commented mandate to --out. " +
			"It never applies anything: review the file, then run `countersign mandate apply`.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if out == "" {
				return errors.New("--out FILE is required")
			}
			if !force {
				if _, err := os.Stat(out); err == nil {
					return fmt.Errorf("%s exists; pass --force to overwrite it", out)
				}
			}
			a, err := askMandate(&prompter{in: bufio.NewScanner(cmd.InOrStdin()), out: cmd.OutOrStdout()}, time.Now())
			if err != nil {
				return err
			}
			y, err := mandate.Template(a)
			if err != nil {
				return err
			}
			flags := os.O_WRONLY | os.O_CREATE | os.O_EXCL
			if force {
				flags = os.O_WRONLY | os.O_CREATE | os.O_TRUNC
			}
			f, err := os.OpenFile(out, flags, 0o644) //nolint:gosec // a mandate is policy for review, not a secret
			if err != nil {
				return err
			}
			if _, err := f.Write(y); err != nil {
				_ = f.Close()
				return err
			}
			if err := f.Close(); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "\nWrote %s. Review it, then:\n  countersign mandate lint %s\n  countersign mandate apply %s --database-url …\n", out, out, out)
			return nil
		},
	}
	cmd.Flags().StringVar(&out, "out", "", "file to write the draft mandate to (required)")
	cmd.Flags().BoolVar(&force, "force", false, "overwrite --out if it exists")
	return cmd
}

// prompter asks questions on out and reads one-line answers from in,
// asking again until an answer is acceptable.
type prompter struct {
	in  *bufio.Scanner
	out io.Writer
}

// ask prints question (with def shown, if any) and returns the first answer
// accept takes; an empty answer means def.
func (p *prompter) ask(question, def string, accept func(string) error) (string, error) {
	for {
		if def != "" {
			fmt.Fprintf(p.out, "%s [%s]: ", question, def)
		} else {
			fmt.Fprintf(p.out, "%s: ", question)
		}
		if !p.in.Scan() {
			if err := p.in.Err(); err != nil {
				return "", err
			}
			// Input ended: the shown default is the answer, as an empty line
			// would have made it; without one there is nothing to take.
			if def == "" {
				return "", fmt.Errorf("no answer to %q: input ended", question)
			}
			if err := accept(def); err != nil {
				return "", fmt.Errorf("no answer to %q: input ended, and the default %q is refused: %w", question, def, err)
			}
			fmt.Fprintf(p.out, "%s (input ended: took the default)\n", def)
			return def, nil
		}
		answer := strings.TrimSpace(p.in.Text())
		if answer == "" {
			answer = def
		}
		err := errors.New("an answer is required")
		if answer != "" {
			if !utf8.ValidString(answer) {
				err = errors.New("the answer is not valid UTF-8")
			} else {
				err = accept(answer)
			}
		}
		if err == nil {
			return answer, nil
		}
		fmt.Fprintf(p.out, "  %v; try again.\n", err)
	}
}

var (
	initAgentID  = regexp.MustCompile(`^agt_[a-z0-9]{8,64}$`)
	initCurrency = regexp.MustCompile(`^[A-Za-z]{3}$`)
	initMinor    = regexp.MustCompile(`^[1-9][0-9]{0,17}$`)
)

// minorUnits accepts a positive whole number of minor units and nothing
// else: no decimal point, sign, separators or exponent.
func minorUnits(r countersignv1.Rail, currency string) func(string) error {
	return func(s string) error {
		if !initMinor.MatchString(s) {
			return fmt.Errorf("%q is not a whole number of minor units of %s (%s)", s, currency, minorExample(r, 5000, currency))
		}
		return nil
	}
}

func listAnswer(s string) []string {
	return strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' })
}

func askMandate(p *prompter, now time.Time) (mandate.Answers, error) {
	var a mandate.Answers
	railNames := mandate.EnumNames(countersignv1.Rail(0).Descriptor())
	actionNames := mandate.EnumNames(countersignv1.ActionKind(0).Descriptor())
	steps := []func() error{
		func() error {
			_, err := p.ask("What may the agent do? Any of "+strings.Join(actionNames, ", ")+", separated by commas", "", func(s string) error {
				a.Actions = nil
				seen := map[countersignv1.ActionKind]bool{}
				for _, w := range listAnswer(strings.ToLower(s)) {
					v, ok := mandate.EnumValue(countersignv1.ActionKind(0).Descriptor(), w)
					if !ok {
						return fmt.Errorf("%q is not one of %s", w, strings.Join(actionNames, ", "))
					}
					if k := countersignv1.ActionKind(v); !seen[k] {
						seen[k] = true
						a.Actions = append(a.Actions, k)
					}
				}
				if len(a.Actions) == 0 {
					return errors.New("name at least one action")
				}
				return nil
			})
			return err
		},
		// The rail comes before the amounts: what a number of minor units
		// means depends on it (Stripe reads MGA and ISK apart from ISO 4217).
		func() error {
			s, err := p.ask("Rail ("+strings.Join(railNames, ", ")+")", "", func(s string) error {
				if _, ok := mandate.EnumValue(countersignv1.Rail(0).Descriptor(), s); !ok {
					return fmt.Errorf("%q is not one of %s", s, strings.Join(railNames, ", "))
				}
				return nil
			})
			v, _ := mandate.EnumValue(countersignv1.Rail(0).Descriptor(), s)
			a.Rail = countersignv1.Rail(v)
			return err
		},
		func() error {
			s, err := p.ask("Currency (ISO 4217, e.g. USD, INR)", "", func(s string) error {
				if !initCurrency.MatchString(s) {
					return fmt.Errorf("%q is not a three-letter currency code", s)
				}
				return nil
			})
			a.Currency = strings.ToUpper(s)
			return err
		},
		func() error {
			s, err := p.ask(fmt.Sprintf("The most the agent may move in one action, in minor units of %s (%s)", a.Currency, minorExample(a.Rail, 5000, a.Currency)), "", minorUnits(a.Rail, a.Currency))
			a.MaxPerAction, _ = strconv.ParseInt(s, 10, 64)
			return err
		},
		func() error {
			s, err := p.ask(fmt.Sprintf("Daily cap across all actions, in minor units of %s", a.Currency), "", func(s string) error {
				if err := minorUnits(a.Rail, a.Currency)(s); err != nil {
					return err
				}
				if v, _ := strconv.ParseInt(s, 10, 64); v < a.MaxPerAction {
					return fmt.Errorf("the daily cap must be at least the per-action maximum (%s)", minorExample(a.Rail, a.MaxPerAction, a.Currency))
				}
				return nil
			})
			a.DailyCap, _ = strconv.ParseInt(s, 10, 64)
			return err
		},
		func() error {
			s, err := p.ask("Rail account the agent acts on (e.g. acct_… for Stripe)", "", func(s string) error {
				if len(s) > 255 || strings.ContainsAny(s, " \t") {
					return errors.New("a rail account id is one word of at most 255 characters")
				}
				return nil
			})
			a.RailAccount = s
			return err
		},
		func() error {
			s, err := p.ask("Agent id (agt_…)", "", func(s string) error {
				if !initAgentID.MatchString(s) {
					return fmt.Errorf("%q is not an agent id: agt_ followed by 8 to 64 lower-case letters and digits", s)
				}
				return nil
			})
			a.AgentID = s
			return err
		},
		func() error {
			s, err := p.ask("What is the agent for? (shown to approvers)", "", func(s string) error {
				if len(s) > 1000 {
					return errors.New("keep it under 1000 characters")
				}
				return nil
			})
			a.Purpose = s
			return err
		},
		func() error {
			needPayees := false
			for _, k := range a.Actions {
				needPayees = needPayees || k == countersignv1.ActionKind_ACTION_KIND_PAYOUT || k == countersignv1.ActionKind_ACTION_KIND_TRANSFER
			}
			if !needPayees {
				return nil
			}
			s, err := p.ask("Payees it may pay out or transfer to (destination ids, separated by commas)", "", func(s string) error {
				if len(listAnswer(s)) == 0 {
					return errors.New("name at least one payee")
				}
				return nil
			})
			seen := map[string]bool{}
			for _, payee := range listAnswer(s) {
				if !seen[payee] {
					seen[payee] = true
					a.Payees = append(a.Payees, payee)
				}
			}
			return err
		},
		func() error {
			s, err := p.ask("Who approves exceptions? (name or email; noted in the file)", "", func(string) error { return nil })
			a.Approver = s
			return err
		},
		func() error {
			s, err := p.ask("Must every request wait for "+a.Approver+"'s approval (approval_required), "+
				"or may the agent act within these limits and only exceptions wait (budgeted)?", "approval_required", func(s string) error {
				if s != "approval_required" && s != "budgeted" {
					return fmt.Errorf("%q is neither approval_required nor budgeted", s)
				}
				return nil
			})
			if s == "budgeted" {
				a.Mode = countersignv1.MandateMode_MANDATE_MODE_BUDGETED
			} else {
				a.Mode = countersignv1.MandateMode_MANDATE_MODE_APPROVAL_REQUIRED
			}
			return err
		},
		func() error {
			s, err := p.ask("For how many days from now is the mandate valid?", "90", func(s string) error {
				if d, err := strconv.Atoi(s); err != nil || d < 1 || d > 3650 {
					return fmt.Errorf("%q is not a number of days from 1 to 3650", s)
				}
				return nil
			})
			days, _ := strconv.Atoi(s)
			a.ValidFrom = now.UTC().Truncate(time.Minute)
			a.ValidUntil = a.ValidFrom.AddDate(0, 0, days)
			return err
		},
	}
	for _, step := range steps {
		if err := step(); err != nil {
			return mandate.Answers{}, err
		}
	}
	return a, nil
}
