package bootstrap

import (
	"fmt"
	"math"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
)

// Bytes is a flag value of a size in bytes, written as a number with an
// optional unit as GOMEMLIMIT takes it: B, KiB, MiB, GiB or TiB
// ("448MiB", "1GiB", "1048576").
type Bytes int64

var byteUnits = []struct {
	suffix string
	size   int64
}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"B", 1}}

// ParseBytes parses a size as Bytes does.
func ParseBytes(s string) (int64, error) {
	num, size := strings.TrimSpace(s), int64(1)
	for _, u := range byteUnits {
		if n, ok := strings.CutSuffix(num, u.suffix); ok {
			num, size = strings.TrimSpace(n), u.size
			break
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n < 0 || n > (1<<62)/size {
		return 0, fmt.Errorf("%q is not a size: want a number of bytes, optionally with B, KiB, MiB, GiB or TiB (448MiB)", s)
	}
	return n * size, nil
}

func (b *Bytes) Set(s string) error {
	n, err := ParseBytes(s)
	if err != nil {
		return err
	}
	*b = Bytes(n)
	return nil
}

func (b *Bytes) String() string {
	n := int64(*b)
	for _, u := range byteUnits {
		if n != 0 && n%u.size == 0 {
			return strconv.FormatInt(n/u.size, 10) + u.suffix
		}
	}
	return "0"
}

func (b *Bytes) Type() string { return "size" }

// SetMemoryLimit gives Go's garbage collector a soft limit of limit bytes
// for the whole process (runtime/debug.SetMemoryLimit, as GOMEMLIMIT
// does): it collects more often as the heap nears the limit instead of
// letting it grow past it. 0 leaves the runtime's setting. While a limit
// is in effect (this one or GOMEMLIMIT's) and GOGC is not set, the
// collector runs at gcPercentUnderLimit.
func SetMemoryLimit(limit int64) {
	if limit > 0 {
		debug.SetMemoryLimit(limit)
	}
	if debug.SetMemoryLimit(-1) < math.MaxInt64 && os.Getenv("GOGC") == "" {
		debug.SetGCPercent(gcPercentUnderLimit)
	}
}

// gcPercentUnderLimit is the GC percent of a process with a memory limit:
// between collections the heap may grow to three times what is live
// rather than Go's default of twice, and the limit keeps it within the
// memory the process was given. Fewer collections cost less CPU for the
// same work; where the live heap nears the limit, the limit decides and
// the percent does not matter.
const gcPercentUnderLimit = 200
