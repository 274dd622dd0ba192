package ledger

import "context"

// LiveApprovalsMark summarises what LiveApprovals(ctx, ownerID, agentID,
// limit) would return as the ids and states of its approvals: equal marks
// mean equal answers as far as a watcher compares them (an approval enters
// or leaves the set, or turns from pending to approved). It reads only the
// approvals' ids and states, not their intents' requests, so a watch can
// poll it and re-read the set only when it changed. Time running out
// changes it too: the set is taken at now(), as LiveApprovals takes it.
// (sha256, not md5, which a FIPS build of Postgres refuses.)
func (s *Store) LiveApprovalsMark(ctx context.Context, ownerID, agentID string, limit int) (string, error) {
	var mark string
	err := s.pool.QueryRow(ctx, `SELECT count(*) || ':' || coalesce(encode(sha256(convert_to(string_agg(id || ' ' || state, ',' ORDER BY id), 'UTF8')), 'hex'), '')
		FROM (SELECT ap.id, ap.state FROM approvals ap
			WHERE ap.owner_id = $1 AND ap.state IN ('pending', 'approved') AND ap.expires_at > now() AND ($2 = '' OR ap.agent_id = $2)
			ORDER BY ap.id LIMIT $3) live`, ownerID, agentID, limit).Scan(&mark)
	return mark, classify(err)
}
