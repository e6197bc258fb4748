package api

import (
	"context"
	"net/http"
	"strings"

	"github.com/orderly/orderly/service"
)

// ConsistencyTokenHeader names the header of the consistency token: a write's
// response carries it (when the server has read replicas), and a read that
// sends it back is answered from a replica only once that replica shows the
// write, else from the primary — the client reads its own writes. The token
// is opaque; a token the server did not make is a 400.
const ConsistencyTokenHeader = "Orderly-Consistency-Token"

// readContext returns r's context carrying the consistency token r sent.
func readContext(r *http.Request) context.Context {
	return service.WithConsistencyToken(r.Context(), strings.TrimSpace(r.Header.Get(ConsistencyTokenHeader)))
}

// setConsistencyToken sets the consistency token on the response to a
// write that has just succeeded (err nil, not a replay): the one answer a
// replica could serve the next read of stale. A replay's write was
// committed earlier (its first answer carried a token), and an error answer
// (4xx, 5xx) gets none; reading the token costs a round trip to the primary
// (store.ReplicaReader.ConsistencyToken), taken only with replicas
// configured.
func (s *server) setConsistencyToken(w http.ResponseWriter, r *http.Request, res service.Result, err error) {
	if err != nil || res.Replayed {
		return
	}
	if tok := s.svc.ConsistencyToken(r.Context()); tok != "" {
		w.Header().Set(ConsistencyTokenHeader, tok)
	}
}
