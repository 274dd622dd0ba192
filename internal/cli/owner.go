package cli

import (
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
	"github.com/countersign/countersign/internal/config"
	"github.com/countersign/countersign/internal/ledger"
	"github.com/countersign/countersign/internal/ownerauth"
)

func table(w io.Writer, header string, rows [][]string) {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, header)
	for _, r := range rows {
		cells := make([]string, len(r))
		for i, c := range r {
			cells[i] = shown(c)
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	_ = tw.Flush()
}

func newOwner() *cobra.Command {
	owner := &cobra.Command{Use: "owner", Short: "Bootstrap owners of the owner API and grant them rail accounts"}
	cfg := config.Defaults()
	var name string
	var ttl time.Duration
	boot := &cobra.Command{
		Use:   "bootstrap",
		Short: "Create an owner and print its first owner token (shown once)",
		Long: "Bootstrap writes a new owner and an owner token straight into the ledger (it needs --database-url, " +
			"not a running server) and prints the token once. Use it for the first owner; OIDC owners need none.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if _, err := Load(cmd, &cfg, config.Config.ValidateDatabase); err != nil {
				return err
			}
			store, err := ledger.Open(cmd.Context(), cfg.DatabaseURL, ledger.Options{MaxConns: 2, Pooler: cfg.DBPooler})
			if err != nil {
				return err
			}
			defer store.Close()
			o, secret, tok, err := ownerauth.Bootstrap(cmd.Context(), store, name, ttl)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "owner %s (%s)\ntoken %s expires %s\n%s\n", o.ID, name, tok.ID,
				tok.ExpiresAt.UTC().Format(time.RFC3339), secret)
			return nil
		},
	}
	cfg.BindDatabase(boot.Flags())
	boot.Flags().StringVar(&name, "name", "", "the owner's name")
	boot.Flags().DurationVar(&ttl, "ttl", 90*24*time.Hour, "how long the token is valid")
	_ = boot.MarkFlagRequired("name")
	owner.AddCommand(boot, newGrantAccount(), newRevokeAccount(), newAccounts())
	return owner
}

// Rail accounts belong to the owners the operator grants them to. These
// commands write the ledger directly (they need --database-url): granting
// is the operator's act, and no API an owner can call grants an account,
// so no owner can claim another's account first.

func newGrantAccount() *cobra.Command {
	cfg := config.Defaults()
	cmd := &cobra.Command{
		Use:   "grant-account RAIL_ACCOUNT OWNER_ID",
		Short: "Give an owner a rail account: it may then put mandates on it and read its audit",
		Long: "grant-account records that OWNER_ID (own_… for a token owner, oidc:<issuer tag>:<subject> for an OIDC owner) " +
			"holds RAIL_ACCOUNT (an account id of the rails file). Only owners holding an account may mandate agents on it, " +
			"and its mandates decide only while the grant lasts. An account may be granted to several owners.",
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			store, err := openLedger(cmd, &cfg)
			if err != nil {
				return err
			}
			defer store.Close()
			created, err := store.GrantRailAccount(cmd.Context(), args[0], args[1])
			if err != nil {
				return err
			}
			if !created {
				fmt.Fprintf(cmd.OutOrStdout(), "%s already holds %s\n", args[1], args[0])
				return nil
			}
			fmt.Fprintf(cmd.OutOrStdout(), "granted %s to %s\n", args[0], args[1])
			return nil
		},
	}
	cfg.BindDatabase(cmd.Flags())
	return cmd
}

func newRevokeAccount() *cobra.Command {
	cfg := config.Defaults()
	cmd := &cobra.Command{
		Use:   "revoke-account RAIL_ACCOUNT OWNER_ID",
		Short: "Withdraw a rail account from an owner, one way; its mandates on it are revoked",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			store, err := openLedger(cmd, &cfg)
			if err != nil {
				return err
			}
			defer store.Close()
			hashes, err := store.RevokeRailAccount(cmd.Context(), args[0], args[1])
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "withdrew %s from %s; revoked %d mandate(s)\n", args[0], args[1], len(hashes))
			for _, h := range hashes {
				fmt.Fprintln(cmd.OutOrStdout(), h)
			}
			return nil
		},
	}
	cfg.BindDatabase(cmd.Flags())
	return cmd
}

func newAccounts() *cobra.Command {
	cfg := config.Defaults()
	var account, ownerID string
	cmd := &cobra.Command{
		Use:   "accounts",
		Short: "List rail account grants (live and revoked)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			store, err := openLedger(cmd, &cfg)
			if err != nil {
				return err
			}
			defer store.Close()
			gs, err := store.RailAccountGrants(cmd.Context(), account, ownerID)
			if err != nil {
				return err
			}
			var rows [][]string
			for _, g := range gs {
				revoked := "-"
				if g.RevokedAt != nil {
					revoked = g.RevokedAt.UTC().Format(time.RFC3339) + " by " + g.RevokedBy
				}
				rows = append(rows, []string{g.RailAccount, g.OwnerID, g.GrantedAt.UTC().Format(time.RFC3339) + " by " + g.GrantedBy, revoked})
			}
			table(cmd.OutOrStdout(), "RAIL ACCOUNT\tOWNER\tGRANTED\tREVOKED", rows)
			return nil
		},
	}
	cfg.BindDatabase(cmd.Flags())
	cmd.Flags().StringVar(&account, "rail-account", "", "only this rail account")
	cmd.Flags().StringVar(&ownerID, "owner", "", "only this owner")
	return cmd
}

func newAgent() *cobra.Command {
	var f ownerFlags
	agent := &cobra.Command{Use: "agent", Short: "Create, list and revoke agents (owner API)"}
	f.bind(agent)
	agent.AddCommand(&cobra.Command{
		Use: "create NAME", Short: "Create an agent", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, ctx, done, err := f.open(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			r, err := c.client.CreateAgent(ctx, &countersignv1.CreateAgentRequest{Agent: &countersignv1.Agent{DisplayName: args[0]}})
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), r.GetAgent().GetAgentId())
			return nil
		},
	}, &cobra.Command{
		Use: "list", Short: "List agents", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, ctx, done, err := f.open(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			var rows [][]string
			token := ""
			for {
				r, err := c.client.ListAgents(ctx, &countersignv1.ListAgentsRequest{PageToken: token, ShowRevoked: true})
				if err != nil {
					return err
				}
				for _, a := range r.GetAgents() {
					rows = append(rows, []string{a.GetAgentId(), strings.TrimPrefix(a.GetState().String(), "AGENT_STATE_"), a.GetDisplayName()})
				}
				if token = r.GetNextPageToken(); token == "" {
					break
				}
			}
			table(cmd.OutOrStdout(), "AGENT\tSTATE\tNAME", rows)
			return nil
		},
	}, &cobra.Command{
		Use: "revoke AGENT_ID", Short: "Revoke an agent, one way (its held requests are voided)", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, ctx, done, err := f.open(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			if _, err := c.client.RevokeAgent(ctx, &countersignv1.RevokeAgentRequest{AgentId: args[0]}); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "revoked %s\n", args[0])
			return nil
		},
	})
	return agent
}

func newCredential() *cobra.Command {
	var f ownerFlags
	var scope string
	var ttl time.Duration
	cred := &cobra.Command{Use: "credential", Short: "Issue and revoke agent credentials (owner API)"}
	f.bind(cred)
	issue := &cobra.Command{
		Use: "issue AGENT_ID", Short: "Issue a credential; the secret is printed once", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			sc := map[string]countersignv1.CredentialScope{"propose": countersignv1.CredentialScope_CREDENTIAL_SCOPE_PROPOSE,
				"execute": countersignv1.CredentialScope_CREDENTIAL_SCOPE_EXECUTE}[scope]
			if sc == countersignv1.CredentialScope_CREDENTIAL_SCOPE_UNSPECIFIED {
				return fmt.Errorf("--scope must be propose or execute, got %q", scope)
			}
			c, ctx, done, err := f.open(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			r, err := c.client.IssueCredential(ctx, &countersignv1.IssueCredentialRequest{AgentId: args[0], Scope: sc,
				ExpireTime: timestamppb.New(time.Now().Add(ttl))})
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "credential %s\n%s\n", r.GetCredential().GetCredentialId(), r.GetSecret())
			return nil
		},
	}
	issue.Flags().StringVar(&scope, "scope", "execute", "propose (every money-moving request is held) or execute")
	issue.Flags().DurationVar(&ttl, "ttl", 30*24*time.Hour, "how long the credential is valid")
	cred.AddCommand(issue, &cobra.Command{
		Use: "revoke AGENT_ID CREDENTIAL_ID", Short: "Revoke a credential, one way; the next decision refuses it", Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, ctx, done, err := f.open(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			if _, err := c.client.RevokeCredential(ctx, &countersignv1.RevokeCredentialRequest{AgentId: args[0], CredentialId: args[1]}); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "revoked %s\n", args[1])
			return nil
		},
	})
	return cred
}

func newApprovals() *cobra.Command {
	var f ownerFlags
	var note, fingerprint, state string
	ap := &cobra.Command{Use: "approvals", Short: "List, show, approve and reject held requests (owner API)"}
	f.bind(ap)
	decide := func(approve bool) func(cmd *cobra.Command, args []string) error {
		return func(cmd *cobra.Command, args []string) error {
			c, ctx, done, err := f.open(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			var a *countersignv1.Approval
			if approve {
				r, err := c.client.ApproveApproval(ctx, &countersignv1.ApproveApprovalRequest{ApprovalId: args[0], RequestFingerprint: fingerprint, Note: note})
				if err != nil {
					return refusal(err)
				}
				a = r.GetApproval()
			} else {
				r, err := c.client.RejectApproval(ctx, &countersignv1.RejectApprovalRequest{ApprovalId: args[0], Note: note})
				if err != nil {
					return refusal(err)
				}
				a = r.GetApproval()
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s %s: %s\n", shown(a.GetApprovalId()), approvalState(a), shown(approvalWhat(a)))
			return nil
		}
	}
	approve := &cobra.Command{Use: "approve APPROVAL_ID", Short: "Approve a held request (used once, by the identical request)", Args: cobra.ExactArgs(1), RunE: decide(true)}
	reject := &cobra.Command{Use: "reject APPROVAL_ID", Short: "Reject a held request; it is blocked for good", Args: cobra.ExactArgs(1), RunE: decide(false)}
	approve.Flags().StringVar(&note, "note", "", "why")
	approve.Flags().StringVar(&fingerprint, "fingerprint", "", "approve only if the approval covers this request fingerprint (from `approvals get`)")
	reject.Flags().StringVar(&note, "note", "", "why")
	list := &cobra.Command{
		Use: "list", Short: "List approvals (pending unless --state says otherwise)", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			want, ok := approvalStateFlag[state]
			if !ok {
				return fmt.Errorf("--state must be one of pending, approved, rejected, expired, used, void or all, got %q", state)
			}
			c, ctx, done, err := f.open(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			var rows [][]string
			token := ""
			for {
				r, err := c.client.ListApprovals(ctx, &countersignv1.ListApprovalsRequest{State: want, PageToken: token})
				if err != nil {
					return refusal(err)
				}
				for _, a := range r.GetApprovals() {
					rows = append(rows, approvalRow(a))
				}
				if token = r.GetNextPageToken(); token == "" {
					break
				}
			}
			table(cmd.OutOrStdout(), "APPROVAL\tSTATE\tAGENT\tACTION\tSUBJECT\tAMOUNT\tPAYEE\tEXPIRES\tHELD BY\tWHY HELD", rows)
			return nil
		},
	}
	list.Flags().StringVar(&state, "state", "pending", "pending, approved, rejected, expired, used, void or all")
	get := &cobra.Command{
		Use: "get APPROVAL_ID", Short: "Show one approval and the exact request it is bound to", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, ctx, done, err := f.open(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			r, err := c.client.GetApproval(ctx, &countersignv1.GetApprovalRequest{ApprovalId: args[0]})
			if err != nil {
				return refusal(err)
			}
			printApproval(cmd.OutOrStdout(), r.GetApproval())
			return nil
		},
	}
	ap.AddCommand(list, get, approve, reject)
	return ap
}

// refusal is the owner API's own sentence for a refused call ("approval
// apr_… was already used …"), without the gRPC framing.
func refusal(err error) error {
	if st, ok := status.FromError(err); ok {
		return fmt.Errorf("%s (%s)", st.Message(), st.Code())
	}
	return err
}

var approvalStateFlag = map[string]countersignv1.ApprovalState{
	"all":      countersignv1.ApprovalState_APPROVAL_STATE_UNSPECIFIED,
	"pending":  countersignv1.ApprovalState_APPROVAL_STATE_PENDING,
	"approved": countersignv1.ApprovalState_APPROVAL_STATE_APPROVED,
	"rejected": countersignv1.ApprovalState_APPROVAL_STATE_REJECTED,
	"expired":  countersignv1.ApprovalState_APPROVAL_STATE_EXPIRED,
	"used":     countersignv1.ApprovalState_APPROVAL_STATE_USED,
	"void":     countersignv1.ApprovalState_APPROVAL_STATE_VOID,
}

func approvalState(a *countersignv1.Approval) string {
	return strings.TrimPrefix(a.GetState().String(), "APPROVAL_STATE_")
}

func enumWord(s, prefix string) string { return strings.ToLower(strings.TrimPrefix(s, prefix)) }

// approvalWhat is the held request in a few words: "refund of 42.00 USD on
// pi_1" or "payout of 1,500 JPY to ba_1".
func approvalWhat(a *countersignv1.Approval) string {
	what := fmt.Sprintf("%s of %s", enumWord(a.GetActionKind().String(), "ACTION_KIND_"), showMoney(a.GetRail(), a.GetAmount()))
	if a.GetPayee() != "" && a.GetPayee() != a.GetSubject() {
		return what + " on " + a.GetSubject() + " to " + a.GetPayee()
	}
	if a.GetActionKind() == countersignv1.ActionKind_ACTION_KIND_REFUND {
		return what + " on " + a.GetSubject()
	}
	return what + " to " + a.GetSubject()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func approvalRow(a *countersignv1.Approval) []string {
	held := a.GetHeldBy()
	return []string{a.GetApprovalId(), approvalState(a), a.GetAgentId(), enumWord(a.GetActionKind().String(), "ACTION_KIND_"),
		a.GetSubject(), showMoney(a.GetRail(), a.GetAmount()), orDash(a.GetPayee()),
		a.GetExpireTime().AsTime().UTC().Format(time.RFC3339), orDash(held.GetGate()), orDash(held.GetReason())}
}

// printApproval writes one approval for review: what the request does, in
// major units, why it was held, and the exact request the approval binds.
func printApproval(w io.Writer, a *countersignv1.Approval) {
	stamp := func(t *timestamppb.Timestamp) string {
		if t == nil {
			return "-"
		}
		return t.AsTime().UTC().Format(time.RFC3339)
	}
	held := a.GetHeldBy()
	amount := "-"
	if a.GetAmount() != nil {
		amount = fmt.Sprintf("%s (%d minor units)", showMoney(a.GetRail(), a.GetAmount()), a.GetAmount().GetAmountMinor())
	}
	rows := [][]string{
		{"approval", a.GetApprovalId()},
		{"state", approvalState(a)},
		{"agent", a.GetAgentId()},
		{"rail account", enumWord(a.GetRail().String(), "RAIL_") + " " + a.GetRailAccount()},
		{"action", enumWord(a.GetActionKind().String(), "ACTION_KIND_")},
		{"subject", a.GetSubject()},
		{"amount", amount},
		{"payee", orDash(a.GetPayee())},
		{"held by", orDash(strings.TrimSpace(held.GetGate() + " " + held.GetReasonCode()))},
		{"why held", orDash(held.GetReason())},
		{"mandate", orDash(a.GetMandateHash())},
		{"created", stamp(a.GetCreateTime())},
		{"expires", stamp(a.GetExpireTime())},
		{"decided", stamp(a.GetDecideTime())},
		{"note", orDash(a.GetNote())},
		{"intent", a.GetSik()},
		{"fingerprint", a.GetRequestFingerprint()},
		{"request", a.GetCanonicalRequest()},
		{"labels", orDash(labelsText(a.GetLabels()))},
		{"labels hash", orDash(a.GetLabelsDigest())},
	}
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\n", r[0], shown(r[1]))
	}
	_ = tw.Flush()
}

// labelsText writes an approval's labels in name order, each value quoted
// (Go syntax), so text the agent chose cannot drive the owner's terminal.
func labelsText(labels map[string]string) string {
	names := make([]string, 0, len(labels))
	for k := range labels {
		names = append(names, k)
	}
	sort.Strings(names)
	parts := make([]string, len(names))
	for i, k := range names {
		parts[i] = strconv.Quote(k) + "=" + strconv.Quote(labels[k])
	}
	return strings.Join(parts, " ")
}
