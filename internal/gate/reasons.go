package gate

// Reason codes the gates return; stable, snake_case, stored with every
// decision and shown to the agent in refusal bodies.
const (
	ReasonPassed       = "passed"        // the gate found nothing against the action
	ReasonApproved     = "approved"      // a HOLD was lifted by the owner's approval of this exact request
	ReasonNotEvaluated = "not_evaluated" // a fact the gate needs is missing (another gate names it); fails closed

	ReasonNoGates        = "no_gates"        // Ladder was given no results
	ReasonVerdictInvalid = "verdict_invalid" // a gate returned an out-of-range verdict

	// G1 scope.
	ReasonClockMissing            = "clock_missing"
	ReasonCredentialRevoked       = "credential_revoked"
	ReasonCredentialExpired       = "credential_expired"
	ReasonCredentialScopeInvalid  = "credential_scope_invalid"
	ReasonCredentialProposeOnly   = "credential_propose_only" // HOLD
	ReasonAgentRevoked            = "agent_revoked"
	ReasonMandateMissing          = "mandate_missing"
	ReasonMandateRevoked          = "mandate_revoked"
	ReasonMandateInvalid          = "mandate_invalid"
	ReasonMandateNotYetValid      = "mandate_not_yet_valid"
	ReasonMandateExpired          = "mandate_expired"
	ReasonMandateWrongAgent       = "mandate_wrong_agent"
	ReasonMandateWrongRailAccount = "mandate_wrong_rail_account"
	ReasonActionNotGranted        = "action_not_granted"
	ReasonCurrencyNotGranted      = "currency_not_granted"
	ReasonActionNotReversible     = "action_not_reversible"
	ReasonFreeTextRefused         = "free_text_refused"
	ReasonFreeTextHeld            = "free_text_held" // HOLD

	// G6 provenance.
	ReasonHostNotPinned      = "host_not_pinned"
	ReasonAPIVersionMismatch = "api_version_mismatch"
	ReasonMCPToolDrift       = "mcp_tool_drift"       // the pinned tool's description changed
	ReasonMCPToolEntryDrift  = "mcp_tool_entry_drift" // the pinned tool's whole entry changed
	ReasonMCPToolsListDrift  = "mcp_tools_list_drift" // the server's whole tools list changed
	ReasonMCPToolNotPinned   = "mcp_tool_not_pinned"

	// G2 value.
	ReasonAmountInvalid           = "amount_invalid"
	ReasonCurrencyUnresolved      = "currency_unresolved"
	ReasonCurrencyMismatch        = "currency_mismatch"
	ReasonReferentInvalid         = "referent_invalid"
	ReasonNothingRefundable       = "nothing_refundable"
	ReasonAmountExceedsRefundable = "amount_exceeds_refundable"
	ReasonPayeeNotAllowed         = "payee_not_allowed"

	// G3 limits.
	ReasonUsageInvalid            = "usage_invalid"
	ReasonAmountOverflow          = "amount_overflow"
	ReasonAmountBelowMinimum      = "amount_below_minimum"
	ReasonAmountAboveMaximum      = "amount_above_maximum"
	ReasonWindowCallsExceeded     = "window_calls_exceeded"
	ReasonWindowAmountExceeded    = "window_amount_exceeded"
	ReasonRecurrenceLimitExceeded = "recurrence_limit_exceeded"
	ReasonFeeBudgetExhausted      = "fee_budget_exhausted"
	ReasonBudgetExceeded          = "budget_exceeded"
	ReasonCurrencyNotBudgeted     = "currency_not_budgeted"
	ReasonCurrencyNotWindowed     = "currency_not_windowed"
	ReasonFeeCurrencyNotBudgeted  = "fee_currency_not_budgeted"
	ReasonRefundSpeedNotBudgeted  = "refund_speed_not_budgeted" // a paid refund speed beside a fee budget
	ReasonGrantCurrencyAmbiguous  = "grant_currency_ambiguous"  // one maximum for many currencies, nothing else bounding this one
	ReasonApprovalRequired        = "approval_required"         // HOLD
	ReasonApprovalExpired         = "approval_expired"          // HOLD
	ReasonApprovalMismatch        = "approval_mismatch"         // HOLD: the approval was for another request
	ReasonApprovalLabelsChanged   = "approval_labels_changed"   // HOLD: the approval was for other labels

	// G5 advisory.
	ReasonNewPayee            = "new_payee" // HOLD
	ReasonAdvisoryObjection   = "advisory_objection"
	ReasonAdvisoryGateUnknown = "advisory_gate_unknown"
	ReasonAdvisoryFailed      = "advisory_failed"
)
