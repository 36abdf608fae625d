package tenancy_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fairwayhq/fairway/pkg/tenancy"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Multi-process tests re-execute this test binary with
// -test.run=^TestHelperProcess$ and FAIRWAY_TENANCY_HELPER set to a mode.
const (
	envHelper   = "FAIRWAY_TENANCY_HELPER"
	envDSN      = "FAIRWAY_TENANCY_DSN"
	envDuration = "FAIRWAY_TENANCY_HELPER_DURATION"
	envTTL      = "FAIRWAY_TENANCY_HELPER_TTL"
	envWorkers  = "FAIRWAY_TENANCY_HELPER_WORKERS"
)

// helperOut is a line a helper prints on stdout, prefixed with "OUT ".
type helperOut struct {
	Lease      *tenancy.Lease `json:",omitempty"`
	Acquired   int64          `json:",omitempty"`
	Stale      int64          `json:",omitempty"` // releases refused as stale
	Violations []string       `json:",omitempty"`
	Ready      bool           `json:",omitempty"`
}

func emit(o helperOut) {
	b, _ := json.Marshal(o)
	fmt.Printf("OUT %s\n", b)
}

// startHelper starts a helper process in mode and returns it with a reader
// of its OUT lines.
func startHelper(t *testing.T, mode, dsn string, env ...string) (*exec.Cmd, <-chan helperOut) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), append([]string{envHelper + "=" + mode, envDSN + "=" + dsn}, env...)...)
	cmd.Stderr = &prefixWriter{t: t, prefix: mode}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	ch := make(chan helperOut, 64)
	go func() {
		defer close(ch)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line, ok := strings.CutPrefix(sc.Text(), "OUT ")
			if !ok {
				continue
			}
			var o helperOut
			if err := json.Unmarshal([]byte(line), &o); err != nil {
				t.Errorf("helper %s: bad line %q: %v", mode, line, err)
				continue
			}
			ch <- o
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	return cmd, ch
}

type prefixWriter struct {
	t      *testing.T
	prefix string
	mu     sync.Mutex
}

func (w *prefixWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	fmt.Fprintf(os.Stderr, "[%s] %s", w.prefix, p)
	return len(p), nil
}

// TestHelperProcess is not a test: it is the body of helper processes.
func TestHelperProcess(t *testing.T) {
	mode := os.Getenv(envHelper)
	if mode == "" {
		return // run as a normal test: nothing to do
	}
	ctx := context.Background()
	pc, err := pgxpool.ParseConfig(os.Getenv(envDSN))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	pc.MaxConns = 10
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	ttl, _ := time.ParseDuration(os.Getenv(envTTL))
	st, err := tenancy.New(pool, &tenancy.Config{LeaseTTL: ttl})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	switch mode {
	case "hammer":
		d, _ := time.ParseDuration(os.Getenv(envDuration))
		var workers int
		fmt.Sscan(os.Getenv(envWorkers), &workers)
		emit(hammerWorkers(ctx, st, workers, d))
	case "crash":
		ls, err := st.AcquireMany(ctx, []tenancy.AcquireRequest{{Tenant: "crash", Dest: tenancy.DestPostgres, Holder: fmt.Sprint("pid-", os.Getpid()), N: crashSlots}})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		for i := range ls {
			emit(helperOut{Lease: &ls[i]})
		}
		emit(helperOut{Ready: true})
		select {} // hold the slots until killed
	default:
		fmt.Fprintln(os.Stderr, "unknown helper mode", mode)
		os.Exit(2)
	}
	pool.Close()
	os.Exit(0)
}

// Hammer pairs: hammerTenants × hammerDests.
var (
	hammerTenants = []string{"h0", "h1", "h2", "h3", "h4", "h5"}
	hammerDests   = []string{tenancy.DestPostgres, "b2b:p1"}
)

// hammerWorkers acquires, holds and releases random pairs' slots with
// workers goroutines for d. A holder checks what it can see itself:
//   - its process never holds one slot under two live leases;
//   - releasing a lease well before its expiry never reports it stale —
//     a stale report there means somebody else was handed a live slot.
func hammerWorkers(ctx context.Context, st *tenancy.Store, workers int, d time.Duration) helperOut {
	var (
		acquired, stale atomic.Int64
		mu              sync.Mutex
		violations      []string
		held            sync.Map // "tenant/dest/slot" -> token
		wg              sync.WaitGroup
	)
	violate := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		if len(violations) < 20 {
			violations = append(violations, fmt.Sprintf(format, args...))
		}
	}
	deadline := time.Now().Add(d)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(os.Getpid()), uint64(w)))
			holder := fmt.Sprintf("p%d-w%d", os.Getpid(), w)
			pick := func() (string, string) {
				return hammerTenants[rng.IntN(len(hammerTenants))], hammerDests[rng.IntN(len(hammerDests))]
			}
			for time.Now().Before(deadline) {
				var leases []tenancy.Lease
				if rng.IntN(4) == 0 {
					var reqs []tenancy.AcquireRequest
					for range 1 + rng.IntN(3) {
						tn, dst := pick()
						reqs = append(reqs, tenancy.AcquireRequest{Tenant: tn, Dest: dst, Holder: holder, N: 1 + rng.IntN(2)})
					}
					ls, err := st.AcquireMany(ctx, reqs)
					if err != nil {
						violate("acquire many: %v", err)
						return
					}
					leases = ls
				} else {
					tn, dst := pick()
					l, err := st.Acquire(ctx, tn, dst, holder)
					switch {
					case errors.Is(err, tenancy.ErrAtLimit):
						continue
					case err != nil:
						violate("acquire: %v", err)
						return
					}
					leases = []tenancy.Lease{l}
				}
				if len(leases) == 0 {
					continue
				}
				acquired.Add(int64(len(leases)))
				for _, l := range leases {
					key := fmt.Sprintf("%s/%s/%d", l.Tenant, l.Dest, l.Slot)
					if prev, loaded := held.LoadOrStore(key, l.Token); loaded {
						violate("slot %s held twice in one process: tokens %v and %d", key, prev, l.Token)
					}
				}
				time.Sleep(time.Duration(rng.IntN(10_000)) * time.Microsecond) // the "work"
				if rng.IntN(10) == 0 {
					for i, l := range leases {
						nl, err := st.Extend(ctx, l)
						if err != nil {
							violate("extend of live lease %s: %v", l.ID, err)
							continue
						}
						leases[i] = nl
					}
				}
				for _, l := range leases {
					held.Delete(fmt.Sprintf("%s/%s/%d", l.Tenant, l.Dest, l.Slot))
				}
				var err error
				if len(leases) > 1 {
					err = st.ReleaseMany(ctx, leases)
				} else {
					err = st.Release(ctx, leases[0].ID, leases[0].Token)
				}
				if err != nil {
					if errors.Is(err, tenancy.ErrStaleLease) {
						stale.Add(1)
					}
					violate("release of live leases %v: %v", leases, err)
				}
			}
		}()
	}
	wg.Wait()
	return helperOut{Acquired: acquired.Load(), Stale: stale.Load(), Violations: violations}
}
