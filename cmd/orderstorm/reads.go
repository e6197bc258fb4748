package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/orderly/orderly/cmd/orderstorm/internal/book"
	"github.com/orderly/orderly/cmd/orderstorm/internal/check"
)

// readTally counts the reads that follow acknowledged writes, and keeps
// the anomalies among them.
type readTally struct {
	withToken, withoutToken atomic.Int64 // reads answered 200
	staleAllowed            atomic.Int64 // without a token, an older version (allowed: bounded staleness)
	unanswered              atomic.Int64 // no answer after every attempt (faults)
	mu                      sync.Mutex
	anomalies               []check.Anomaly
}

func (t *readTally) add(kind, ref, format string, args ...any) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.anomalies = append(t.anomalies, check.Anomaly{Kind: kind, Ref: ref, Detail: fmt.Sprintf(format, args...)})
}

// report returns the counts for the checker's summary, and the anomalies.
func (t *readTally) report() (check.ReadReport, []check.Anomaly) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return check.ReadReport{WithToken: t.withToken.Load(), WithoutToken: t.withoutToken.Load(),
		StaleAllowed: t.staleAllowed.Load(), Unanswered: t.unanswered.Load()}, append([]check.Anomaly(nil), t.anomalies...)
}

// readAfter reads the order op wrote back, on another instance than the
// write's, after a successful answer ob: three times in four with the
// answer's consistency token, when it carries one (orderd sends one with
// read replicas configured), so the read must show at least ob's version
// (read your writes, whether a replica or the primary serves it); else
// without, when an older version is allowed (bounded staleness) and counted.
// Either way the order exists: a 404 comes from the primary.
func (s *Storm) readAfter(ctx context.Context, rng *rand.Rand, op *book.Op, ob book.Obs) {
	id := op.Order.ID()
	if id == "" || ob.Status < 200 || ob.Status >= 300 || ob.Version == 0 {
		return
	}
	_, inst := s.pick(rng)
	token := ""
	if ob.Token != "" && rng.IntN(4) != 0 {
		token = ob.Token
	}
	rd := s.Send.Read(ctx, inst, id, token)
	ref := fmt.Sprintf("%s/%s#%d", op.Order.Marker, op.Kind, op.Seq)
	switch {
	case rd.Status == 0:
		s.reads.unanswered.Add(1)
	case rd.Status == http.StatusNotFound:
		s.reads.add(check.AnomalyReadLost, ref, "GET %s answered 404 after the %s was answered %d (token %v)", id, op.Kind, ob.Status, token != "")
	case rd.Status != http.StatusOK:
		s.reads.add(check.AnomalyReadStale, ref, "GET %s answered %d after the %s was answered %d (token %v)", id, rd.Status, op.Kind, ob.Status, token != "")
	case token != "":
		s.reads.withToken.Add(1)
		if rd.Version < ob.Version {
			s.reads.add(check.AnomalyReadStale, ref, "GET %s with the %s's consistency token showed version %d (%s), the %s answered version %d (%s)",
				id, op.Kind, rd.Version, rd.State, op.Kind, ob.Version, ob.State)
		}
	default:
		s.reads.withoutToken.Add(1)
		if rd.Version < ob.Version {
			s.reads.staleAllowed.Add(1)
		}
	}
}
