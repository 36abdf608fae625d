package sink

import (
	"cmp"
	"slices"
	"strings"
)

// Latest returns the indexes of the records of batch that a destination must
// write: for each key the record with the highest version, ordered by key so
// that concurrent writers lock rows in the same order. Records whose index
// has skip[i] set (already rejected, say) take no part; skip may be nil.
//
// Between records of one key with the same version the earliest in the batch
// wins, as it does across batches (a later equal version never overwrites).
// Records not returned are superseded by a newer version in the same batch:
// applying them would change nothing, so they count as applied.
func Latest(batch []Record, skip []bool) []int {
	out := make([]int, 0, len(batch))
	for i := range batch {
		if skip == nil || !skip[i] {
			out = append(out, i)
		}
	}
	// By key, then newest first, then earliest first: the first index of
	// each key's run is the one to write. No map: sorting the indexes in
	// batch order is linear when the batch is already in key order (a
	// catalog import), where hashing every key costs about as much as a
	// sort (BenchmarkLatest).
	order := func(a, b int) int {
		ea, eb := &batch[a].Event, &batch[b].Event
		if c := strings.Compare(ea.Tenant, eb.Tenant); c != 0 {
			return c
		}
		if c := strings.Compare(ea.ProductID, eb.ProductID); c != 0 {
			return c
		}
		return cmp.Or(cmp.Compare(eb.Version, ea.Version), cmp.Compare(a, b))
	}
	if !slices.IsSortedFunc(out, order) {
		slices.SortFunc(out, order)
	}
	n := 0
	for _, i := range out {
		if n > 0 {
			prev := &batch[out[n-1]].Event
			if prev.ProductID == batch[i].Event.ProductID && prev.Tenant == batch[i].Event.Tenant {
				continue
			}
		}
		out[n] = i
		n++
	}
	return out[:n]
}

// Isolate applies the records at idx with apply. When apply fails with an
// error that classify reports as caused by the data (data == true), Isolate
// splits idx in halves and applies each, down to single records: a single
// record that still fails gets errs[i] = a *PermanentError with the reason
// from classify, and the other records are applied. Any other error stops the
// bisection and is returned unchanged; the caller then reports the whole
// batch as failed.
//
// One bad record among n costs about 2·log2(n) extra calls to apply. apply
// must be safe to call again for records it failed on (a savepoint rolled
// back, an idempotent insert).
func Isolate(idx []int, apply func(idx []int) error, classify func(error) (reason string, data bool), errs []error) error {
	if len(idx) == 0 {
		return nil
	}
	err := apply(idx)
	if err == nil {
		return nil
	}
	reason, data := classify(err)
	if !data {
		return err
	}
	if len(idx) == 1 {
		errs[idx[0]] = Permanent(reason, err)
		return nil
	}
	mid := len(idx) / 2
	if err := Isolate(idx[:mid], apply, classify, errs); err != nil {
		return err
	}
	return Isolate(idx[mid:], apply, classify, errs)
}

// ApplyLatest writes, for every key of batch, the newest record that the
// destination accepts: it applies Latest(batch) through Isolate, and when the
// newest version of a key is rejected it goes on with the next newest, so a
// poison record never hides an older good one. Records with errs[i] != nil on
// entry (rejected by the sink's own validation) take no part. On return errs
// holds a *PermanentError for every rejected record; a non-nil error is a
// batch failure from apply and errs must then be ignored.
func ApplyLatest(batch []Record, errs []error, apply func(idx []int) error, classify func(error) (reason string, data bool)) error {
	skip := make([]bool, len(batch))
	for i, e := range errs {
		skip[i] = e != nil
	}
	done := make([]bool, len(batch))
	for {
		var todo []int
		for _, i := range Latest(batch, skip) {
			if !done[i] {
				todo = append(todo, i)
			}
		}
		if len(todo) == 0 {
			return nil
		}
		if err := Isolate(todo, apply, classify, errs); err != nil {
			return err
		}
		rejected := false
		for _, i := range todo {
			if errs[i] != nil {
				skip[i], rejected = true, true
			} else {
				done[i] = true
			}
		}
		if !rejected {
			return nil
		}
	}
}
