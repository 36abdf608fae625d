package scheduler

// windowBuckets is the resolution of the dampening window: the window W is
// kept as windowBuckets counters of W/windowBuckets each, so an event counts
// towards the window for between (1-1/windowBuckets)·W and W after it was
// dispatched.
const windowBuckets = 10

// window counts a flow's dispatched events over a sliding window in fixed
// memory. Buckets are indexed by epoch (clock time divided by the bucket
// width); a bucket whose epoch is stale is reset when written and ignored
// when summed, so nothing needs expiring.
type window struct {
	epoch [windowBuckets]int64
	count [windowBuckets]int64
}

func bucketIndex(e int64) int {
	i := e % windowBuckets
	if i < 0 {
		i += windowBuckets
	}
	return int(i)
}

func (w *window) add(e, events int64) {
	i := bucketIndex(e)
	if w.epoch[i] != e {
		w.epoch[i], w.count[i] = e, 0
	}
	w.count[i] += events
}

// sum returns the events recorded in epochs (e-windowBuckets, e].
func (w *window) sum(e int64) int64 {
	var n int64
	for i := range windowBuckets {
		if w.epoch[i] > e-windowBuckets && w.epoch[i] <= e {
			n += w.count[i]
		}
	}
	return n
}
