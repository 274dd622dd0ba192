package cli

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
)

// newIntents is `countersign intents`: the owner's intents, and the
// resolution of a QUARANTINED one after the owner checked the rail.
func newIntents() *cobra.Command {
	var f ownerFlags
	in := &cobra.Command{Use: "intents", Short: "List intents and resolve quarantined ones (owner API)"}
	f.bind(in)

	var state, account string
	list := &cobra.Command{
		Use: "list", Short: "List intents, newest first (all states unless --state says one)", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			want := countersignv1.IntentState_INTENT_STATE_UNSPECIFIED
			if state != "" {
				v, ok := countersignv1.IntentState_value["INTENT_STATE_"+strings.ToUpper(state)]
				if !ok {
					return fmt.Errorf("--state %q is not an intent state (QUARANTINED, UNKNOWN, APPLIED, …)", state)
				}
				want = countersignv1.IntentState(v)
			}
			c, ctx, done, err := f.open(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			var rows [][]string
			for token := ""; ; {
				r, err := c.client.ListIntents(ctx, &countersignv1.ListIntentsRequest{State: want, RailAccount: account, PageToken: token})
				if err != nil {
					return refusal(err)
				}
				for _, it := range r.GetIntents() {
					rows = append(rows, []string{it.GetRailAccount(), it.GetSik(), enumWord(it.GetState().String(), "INTENT_STATE_"),
						enumWord(it.GetActionKind().String(), "ACTION_KIND_"), it.GetSubject(), showMoney(it.GetRail(), it.GetAmount()),
						it.GetAgentId(), it.GetLastReason()})
				}
				if token = r.GetNextPageToken(); token == "" {
					break
				}
			}
			table(cmd.OutOrStdout(), "RAIL ACCOUNT\tSIK\tSTATE\tACTION\tSUBJECT\tAMOUNT\tAGENT\tREASON", rows)
			return nil
		},
	}
	list.Flags().StringVar(&state, "state", "", "only intents in this state (e.g. quarantined)")
	list.Flags().StringVar(&account, "rail-account", "", "only intents of this rail account")

	var applied, note string
	var notApplied bool
	resolve := &cobra.Command{
		Use:   "resolve RAIL_ACCOUNT SIK (--applied ENTITY_ID | --not-applied) --note TEXT",
		Short: "Resolve a quarantined intent as you found it at the rail",
		Long: `Resolve a QUARANTINED intent once you have checked the rail yourself.

--applied ENTITY_ID: the action applied as that rail entity (a refund,
payout or transfer id); its budget hold is posted and the intent is APPLIED.
--not-applied: it did not apply; its hold is voided and the intent ends
BLOCKED, so nothing is sent again on your word (send the action anew with a
distinct reason if it is still wanted). Refused while the rail has answered
one of the intent's attempts applied.

The note, your name as the owner and the outcome are kept for good in the
intent's audit record.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if (applied != "") == notApplied {
				return errors.New("say what you found at the rail: exactly one of --applied ENTITY_ID or --not-applied")
			}
			if strings.TrimSpace(note) == "" {
				return errors.New("--note is required: what you checked at the rail and found")
			}
			req := &countersignv1.ResolveIntentRequest{RailAccount: args[0], Sik: args[1], Note: note,
				Resolution: countersignv1.IntentResolution_INTENT_RESOLUTION_NOT_APPLIED}
			if applied != "" {
				req.Resolution, req.RailEntityId = countersignv1.IntentResolution_INTENT_RESOLUTION_APPLIED, applied
			}
			c, ctx, done, err := f.open(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			r, err := c.client.ResolveIntent(ctx, req)
			if err != nil {
				return refusal(err)
			}
			it := r.GetIntent()
			fmt.Fprintf(cmd.OutOrStdout(), "%s %s: %s (%s)\n", shown(it.GetRailAccount()), shown(it.GetSik()),
				enumWord(it.GetState().String(), "INTENT_STATE_"), shown(it.GetLastReason()))
			return nil
		},
	}
	resolve.Flags().StringVar(&applied, "applied", "", "the rail entity id the action applied as")
	resolve.Flags().BoolVar(&notApplied, "not-applied", false, "the action did not apply at the rail")
	resolve.Flags().StringVar(&note, "note", "", "what you checked at the rail and found (kept in the audit record)")
	in.AddCommand(list, resolve)
	return in
}
