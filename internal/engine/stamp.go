package engine

import (
	"errors"
	"net/http"

	"github.com/countersign/countersign/internal/rail"
	"github.com/countersign/countersign/internal/rails"
	"github.com/countersign/countersign/internal/sik"
)

// ReasonForeignStamp refuses a request that carries, under Countersign's
// stamp key, a value other than the stamp its decision writes there, where
// no ext_proc will overwrite it.
const ReasonForeignStamp = "foreign_stamp"

// errForeignStamp rolls a decision back whose attempt's stamp is not the
// one the request carries (foreignStamp passed a stamp of the same SIK, but
// of another generation).
var errForeignStamp = errors.New("engine: the request carries another stamp than its attempt's")

// stampKept reports whether the request may leave with what it carries
// under the stamp key (a.SentStamp), given that its attempt is stamped
// stamp: when it carries nothing there; when ext_proc writes the stamp over
// it (answersChecked: through Countersign's own routes with ext_proc in
// the path); or when it is that very stamp (a native caller sending again
// the request Decide gave it the stamps of, or an agent whose client
// stamped it as Countersign would). Otherwise the value leaves as the
// agent wrote it, in metadata the rail stores and lists: text that no
// label, and so no free_text policy, saw (found by a review: a card number
// there passed free_text: refuse), or another intent's stamp, which the
// reconciler, matching entities on the stamp alone, would take for that
// intent's. It is refused whatever the mandate's free_text says, as the
// second would be under allow too.
func stampKept(req Request, o Options, a rail.Action, stamp string) bool {
	return a.SentStamp == "" || answersChecked(req, o) || a.SentStamp == stamp
}

// foreignStamp refuses, before the ledger is asked, a request whose value
// under the stamp key is not a stamp of its own SIK s, where no ext_proc
// overwrites it (stampKept). Which generation leaves is known only in the
// deciding transaction, which checks it again (Engine.stamp).
func foreignStamp(req Request, o Options, acct *rails.Account, a rail.Action, s sik.SIK) (Outcome, bool) {
	if stampKept(req, o, a, "") {
		return Outcome{}, false
	}
	if of, _, err := sik.ParseStamp(a.SentStamp); err == nil && of == s {
		return Outcome{}, false
	}
	return foreignStampRefusal(acct, req), true
}

// foreignStampRefusal is the refusal of a request carrying a value under
// the stamp key that is not its stamp. The value is not quoted: it is the
// agent's text.
func foreignStampRefusal(acct *rails.Account, req Request) Outcome {
	return refuseRail(acct, req, ReasonForeignStamp, "This request carries a value under "+sik.StampKey+", where Countersign writes its own stamp, "+
		"and no ext_proc in this deployment writes over it, so the value would leave as sent: only the stamp Countersign gives this request may be there. "+
		"Send the request without "+sik.StampKey+".", http.StatusBadRequest)
}
