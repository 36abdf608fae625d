package testenv_test

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fairwayhq/fairway/internal/testenv"
)

// fatalRecorder is a testing.TB whose Fatalf records the message and ends
// the goroutine, as testing.T's does.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (r *fatalRecorder) Helper() {}

func (r *fatalRecorder) Fatalf(format string, args ...any) {
	r.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// runEventually runs Eventually with r on a goroutine of its own (Fatalf
// ends it) and waits for it.
func runEventually(r *fatalRecorder, timeout time.Duration, what string, cond func() error) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		testenv.Eventually(r, timeout, what, cond)
	}()
	<-done
}

func TestEventuallyReturnsOnceTheConditionHolds(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	r := &fatalRecorder{TB: t}
	start := time.Now()
	runEventually(r, 10*time.Second, "the third call", func() error {
		if calls.Add(1) < 3 {
			return errors.New("not yet")
		}
		return nil
	})
	if r.msg != "" {
		t.Fatalf("failed: %s", r.msg)
	}
	if n := calls.Load(); n != 3 {
		t.Errorf("cond called %d times, want 3", n)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("took %v for a condition that held at the third call", took)
	}
}

func TestEventuallyFailsSayingWhatAndWhy(t *testing.T) {
	t.Parallel()
	r := &fatalRecorder{TB: t}
	start := time.Now()
	n := 0
	runEventually(r, 300*time.Millisecond, "the rows", func() error {
		n++
		return fmt.Errorf("%d of 5 rows", n)
	})
	took := time.Since(start)
	if !strings.Contains(r.msg, "for the rows: ") || !strings.HasSuffix(r.msg, fmt.Sprintf(": %d of 5 rows", n)) {
		t.Errorf("message %q: want what it waited for and the last error", r.msg)
	}
	if took < 300*time.Millisecond || took > 2*time.Second {
		t.Errorf("gave up after %v, want about 300ms", took)
	}
	if n < 5 {
		t.Errorf("cond called %d times in 300ms", n)
	}
}
