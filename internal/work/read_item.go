package work

import (
	"context"
	"strings"

	"github.com/fairwayhq/fairway/pkg/events"
)

// readItemChunk bounds one direct get of ReadItem.
const readItemChunk = 1000

// ReadItem returns it's events: those of it.Tenant with sequences in
// it.FromSeq..it.ToSeq, in order, at most it.Count. It does not fail when
// the range holds fewer (the stream's limits removed some); the caller
// compares the length with it.Count.
//
// A dense item — Count equals the width of the range, as when one tenant
// published the whole range (a catalog import, a sync storm) — is read by
// sequence without a subject filter. The server then neither matches
// subjects message by message nor counts the tenant's pending events for
// every request (NumPending with a wildcard filter walks the stream's
// subject state, which costs more than reading 500 events). Messages of
// other subjects can only be in a dense range if the dispatcher miscounted;
// they are dropped here, so the result is what the filtered read returns.
//
// An item that lists its sequences (Item.Seqs: a small batch spread over
// the stream) is read one sequence at a time, each a lookup by sequence
// instead of a scan of the range.
func (r *Reader) ReadItem(ctx context.Context, it Item) ([]Stored, error) {
	filter, err := events.TenantSubjects(it.Tenant)
	if err != nil {
		return nil, err
	}
	prefix := strings.TrimSuffix(filter, "*")
	ours := func(m Stored) bool {
		rest, ok := strings.CutPrefix(m.Subject, prefix)
		return ok && rest != "" && !strings.Contains(rest, ".")
	}
	out := make([]Stored, 0, it.Count)
	if len(it.Seqs) > 0 && len(it.Seqs) == it.Count {
		for _, seq := range it.Seqs {
			b, err := r.get(ctx, it.Tenant, directGetRequest{Seq: seq, Batch: 1}, seq, seq, ReadOptions{})
			if err != nil {
				return out, err
			}
			// A deleted sequence answers with the next message: not ours.
			if len(b.Msgs) == 1 && b.Msgs[0].Seq == seq && ours(b.Msgs[0]) {
				out = append(out, b.Msgs[0])
			}
		}
		return out, nil
	}
	dense := it.FromSeq > 0 && it.ToSeq >= it.FromSeq && uint64(it.Count) == it.ToSeq-it.FromSeq+1
	if !dense {
		for from := it.FromSeq; from <= it.ToSeq && len(out) < it.Count; {
			b, err := r.Next(ctx, it.Tenant, from, it.ToSeq, ReadOptions{Max: min(it.Count-len(out), readItemChunk)})
			if err != nil {
				return out, err
			}
			if len(b.Msgs) == 0 {
				break
			}
			out = append(out, b.Msgs...)
			from = b.Msgs[len(b.Msgs)-1].Seq + 1
		}
		return out, nil
	}
	for from := it.FromSeq; from <= it.ToSeq && len(out) < it.Count; {
		n := int(min(it.ToSeq-from+1, readItemChunk))
		b, err := r.get(ctx, it.Tenant, directGetRequest{Seq: from, Batch: n}, from, it.ToSeq, ReadOptions{})
		if err != nil {
			return out, err
		}
		if len(b.Msgs) == 0 {
			break
		}
		for _, m := range b.Msgs {
			if ours(m) {
				out = append(out, m)
			}
		}
		from = b.Msgs[len(b.Msgs)-1].Seq + 1
	}
	return out[:min(len(out), it.Count)], nil
}
