package testenv

import (
	"testing"
	"time"
)

// eventuallyPollMax is the longest pause between two calls of an
// Eventually condition.
const eventuallyPollMax = 100 * time.Millisecond

// Eventually calls cond until it returns nil, and fails t if timeout passes
// first, saying what it waited for and cond's last error: what was still
// missing then. Tests wait with it on a state of real servers (a row
// written, a consumer drained) instead of sleeping a guessed time.
//
// The first calls follow each other within a millisecond and the pauses
// double up to 100 ms, so a state reached at once is seen at once and a
// long wait does not load the servers. cond runs on the caller's
// goroutine, so it may call t.Fatal itself for a failure that waiting
// cannot mend.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	pause := time.Millisecond
	for {
		err := cond()
		if err == nil {
			return
		}
		left := time.Until(deadline)
		if left <= 0 {
			t.Fatalf("waited %s for %s: %v", timeout, what, err)
		}
		time.Sleep(min(pause, left))
		pause = min(2*pause, eventuallyPollMax)
	}
}
