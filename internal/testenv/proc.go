package testenv

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat times: 100 on every
// Linux architecture Go supports.
const clockTicks = 100

// ProcessCPU returns the user and system CPU time process pid has used so
// far, and its command name (from /proc/<pid>/stat).
func ProcessCPU(pid int) (used time.Duration, command string, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, "", err
	}
	// The command name (field 2) may hold spaces; fields 14 and 15
	// (utime, stime, in clock ticks) follow its closing parenthesis.
	i, j := bytes.LastIndexByte(b, ')'), bytes.IndexByte(b, '(')
	if i < 0 || j < 0 || j > i {
		return 0, "", fmt.Errorf("unexpected /proc/%d/stat: %q", pid, b)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, "", fmt.Errorf("unexpected /proc/%d/stat: %q", pid, b)
	}
	var ticks int64
	for _, s := range f[11:13] {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, "", fmt.Errorf("/proc/%d/stat: %w", pid, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / clockTicks, string(b[j+1 : i]), nil
}

// CommandCPU returns the CPU time used so far by every running process
// whose command name is command ("postgres", "clickhouse-serv"), by pid.
// The difference of two readings (CPUSince) is what those processes used
// in between, as long as they lived throughout: connection pools keep
// their PostgreSQL backends for a benchmark's length.
func CommandCPU(command string) map[int]time.Duration {
	out := map[int]time.Duration{}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return out
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if used, c, err := ProcessCPU(pid); err == nil && c == command {
			out[pid] = used
		}
	}
	return out
}

// CPUSince is the CPU time the processes of before used since it was read
// with CommandCPU, plus all that processes started since have used.
func CPUSince(before map[int]time.Duration, command string) time.Duration {
	var d time.Duration
	for pid, used := range CommandCPU(command) {
		d += used - before[pid]
	}
	return d
}
