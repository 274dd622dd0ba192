package ledger

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"strconv"
	"strings"
)

// AuditRecord is one link of an audit chain.
type AuditRecord struct {
	Chain       string
	RailAccount string
	Seq         int64
	SIK         string
	FromState   string
	ToState     string
	Event       string
	AttemptSeq  int
	Detail      string
	AtMicros    int64
	PrevHash    []byte
	Hash        []byte
}

// auditField encodes one field as "<octets>:<text>", exactly as the SQL
// function countersign_audit_field does, so concatenation is unambiguous.
func auditField(b *strings.Builder, v string) {
	b.WriteString(strconv.Itoa(len(v)))
	b.WriteByte(':')
	b.WriteString(v)
}

// ComputeHash returns the hash the record must carry given its fields and
// its predecessor's hash: SHA-256(prev ‖ payload).
func (r AuditRecord) ComputeHash(prev []byte) []byte {
	h := sha256.New()
	h.Write(prev)
	h.Write(r.payload())
	return h.Sum(nil)
}

// PayloadHash is SHA-256 of the record's canonical field encoding.
func (r AuditRecord) PayloadHash() []byte {
	sum := sha256.Sum256(r.payload())
	return sum[:]
}

// payload is the record's canonical field encoding.
func (r AuditRecord) payload() []byte {
	var b strings.Builder
	auditField(&b, r.Chain)
	auditField(&b, strconv.FormatInt(r.Seq, 10))
	auditField(&b, r.RailAccount)
	auditField(&b, r.SIK)
	auditField(&b, r.FromState)
	auditField(&b, r.ToState)
	auditField(&b, r.Event)
	auditField(&b, strconv.Itoa(r.AttemptSeq))
	auditField(&b, r.Detail)
	auditField(&b, strconv.FormatInt(r.AtMicros, 10))
	return []byte(b.String())
}

// auditChainsPerAccount is how many hash chains the audit trigger spreads
// one rail account's records over (by the SIK's first hash byte).
const auditChainsPerAccount = 16

// AuditBreak names the first record of a chain that does not verify.
type AuditBreak struct {
	Chain   string
	Seq     int64
	Problem string
}

func (b AuditBreak) Error() string {
	return fmt.Sprintf("audit chain %s broken at record %d: %s", b.Chain, b.Seq, b.Problem)
}

// AuditReport is the result of verifying every chain.
type AuditReport struct {
	Chains  int
	Records int64
	Breaks  []AuditBreak // the first break of each broken chain
}

// VerifyAudit walks every chain from its first record,
// recomputing each hash, and checks the chain head. It reports the first
// broken record of each chain.
func (s *Store) VerifyAudit(ctx context.Context) (AuditReport, error) {
	return s.VerifyAuditOf(ctx, "")
}

// VerifyAuditOf is VerifyAudit restricted to the chains of one rail
// account ("" verifies every chain).
func (s *Store) VerifyAuditOf(ctx context.Context, railAccount string) (AuditReport, error) {
	var rep AuditReport
	// An account's chains are "<rail account>#00" … "#15" (the audit
	// trigger's naming); nil chains means every chain.
	var chains []string
	if railAccount != "" {
		for i := range auditChainsPerAccount {
			chains = append(chains, fmt.Sprintf("%s#%02d", railAccount, i))
		}
	}
	ofAccount := func(col string) string { return "($1::text[] IS NULL OR " + col + " = ANY($1))" }

	rows, err := s.pool.Query(ctx, `SELECT `+auditRecordColumns+`
		FROM audit_records r WHERE `+ofAccount("r.chain")+` ORDER BY r.chain, r.seq`, chains)
	if err != nil {
		return rep, classify(err)
	}
	defer rows.Close()
	var cur string
	var prev []byte
	var next int64
	broken := map[string]bool{}
	fail := func(chain string, seq int64, format string, args ...any) {
		if !broken[chain] {
			broken[chain] = true
			rep.Breaks = append(rep.Breaks, AuditBreak{Chain: chain, Seq: seq, Problem: fmt.Sprintf(format, args...)})
		}
	}
	for rows.Next() {
		r, err := scanAuditRecord(rows)
		if err != nil {
			return rep, classify(err)
		}
		rep.Records++
		if r.Chain != cur {
			cur, prev, next = r.Chain, make([]byte, sha256.Size), 1
			rep.Chains++
		}
		switch {
		case broken[cur]:
		case r.Seq != next:
			fail(cur, next, "record %d is missing (found %d next)", next, r.Seq)
		case !bytes.Equal(r.PrevHash, prev):
			fail(cur, r.Seq, "prev_hash does not match the hash of record %d", r.Seq-1)
		case !bytes.Equal(r.ComputeHash(prev), r.Hash):
			fail(cur, r.Seq, "contents do not match its hash (the record was altered)")
		}
		prev, next = r.Hash, r.Seq+1
	}
	if err := rows.Err(); err != nil {
		return rep, classify(err)
	}
	// Each head must point at its chain's last record: a removed tail, or
	// a head over no records at all, shows here.
	heads, err := s.pool.Query(ctx, `
		SELECT h.chain, h.seq, h.hash, r.seq, r.hash
		FROM audit_heads h LEFT JOIN LATERAL (
			SELECT seq, hash FROM audit_records r WHERE r.chain = h.chain ORDER BY seq DESC LIMIT 1
		) r ON true
		WHERE `+ofAccount("h.chain")+` ORDER BY h.chain`, chains)
	if err != nil {
		return rep, classify(err)
	}
	defer heads.Close()
	for heads.Next() {
		var chain string
		var hseq int64
		var hhash []byte
		var lseq *int64
		var lhash []byte
		if err := heads.Scan(&chain, &hseq, &hhash, &lseq, &lhash); err != nil {
			return rep, classify(err)
		}
		switch {
		case lseq == nil && hseq > 0:
			fail(chain, 1, "the head says %d records but none exist", hseq)
		case lseq != nil && (*lseq != hseq || !bytes.Equal(lhash, hhash)):
			fail(chain, *lseq, "the chain head says record %d, the last record is %d (records after it were removed or the head was altered)", hseq, *lseq)
		}
	}
	return rep, classify(heads.Err())
}
