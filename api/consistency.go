package api

import (
	"context"
	"net/http"
	"strings"

	"github.com/orderly/orderly/apperr"
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

// setConsistencyToken sets the consistency token on the response to a write
// whose outcome err is known: a success, or a final error that may have
// recorded something (a decline moves the order's version). A 5xx stored
// nothing final, so it gets no token.
func (s *server) setConsistencyToken(w http.ResponseWriter, r *http.Request, err error) {
	if code := apperr.ErrorCode(err); code == apperr.EUnavailable || code == apperr.EInternal {
		return
	}
	if tok := s.svc.ConsistencyToken(r.Context()); tok != "" {
		w.Header().Set(ConsistencyTokenHeader, tok)
	}
}
