package kills_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// proc is one service process that the test starts, kills and restarts.
// Its stdout and stderr (JSON logs) go to a file; every incarnation
// appends to it.
type proc struct {
	name string
	bin  string
	args func(incarnation int) []string
	env  []string
	log  string

	mu         sync.Mutex
	cmd        *exec.Cmd
	done       chan struct{} // closed when the current incarnation exited
	listening  chan string   // the current incarnation's HTTP address
	killing    bool
	starts     int
	unexpected []string // exits the test did not cause
	races      int      // "WARNING: DATA RACE" lines
	panics     []string // first lines of panics and fatal errors
}

func newProc(dir, name, bin string, env []string, args func(int) []string) *proc {
	return &proc{name: name, bin: bin, args: args, env: env, log: filepath.Join(dir, name+".log")}
}

// start starts a new incarnation.
func (p *proc) start() error {
	f, err := os.OpenFile(p.log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.starts++
	fmt.Fprintf(f, "=== %s incarnation %d at %s\n", p.name, p.starts, time.Now().Format(time.RFC3339Nano))
	listening := make(chan string, 1)
	lw := &lineWriter{w: f, onLine: func(line []byte) { p.scan(line, listening) }}
	cmd := exec.Command(p.bin, p.args(p.starts)...)
	cmd.Env = append(os.Environ(), p.env...)
	cmd.Stdout, cmd.Stderr = lw, lw // one writer: exec copies through one pipe
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("start %s: %w", p.name, err)
	}
	done := make(chan struct{})
	p.cmd, p.done, p.listening = cmd, done, listening
	go func() {
		err := cmd.Wait()
		lw.flush()
		f.Close()
		p.mu.Lock()
		if !p.killing {
			p.unexpected = append(p.unexpected, fmt.Sprintf("incarnation %d exited by itself: %v", p.starts, err))
		}
		p.mu.Unlock()
		close(done)
	}()
	return nil
}

// scan looks at one log line: the listen address, data races, panics.
func (p *proc) scan(line []byte, listening chan string) {
	switch {
	case bytes.Contains(line, []byte("WARNING: DATA RACE")):
		p.mu.Lock()
		p.races++
		p.mu.Unlock()
		return
	case bytes.HasPrefix(line, []byte("panic:")), bytes.HasPrefix(line, []byte("fatal error:")):
		p.mu.Lock()
		p.panics = append(p.panics, string(line))
		p.mu.Unlock()
		return
	case !bytes.Contains(line, []byte(" listening")):
		return
	}
	var rec struct {
		Msg  string `json:"msg"`
		Addr string `json:"addr"`
	}
	if json.Unmarshal(line, &rec) == nil && strings.HasSuffix(rec.Msg, " listening") && rec.Addr != "" {
		select {
		case listening <- rec.Addr:
		default:
		}
	}
}

// waitListening waits until the current incarnation serves HTTP and
// returns its address.
func (p *proc) waitListening(timeout time.Duration) (string, error) {
	p.mu.Lock()
	listening, done := p.listening, p.done
	p.mu.Unlock()
	select {
	case addr := <-listening:
		listening <- addr // keep it for later callers
		return addr, nil
	case <-done:
		return "", fmt.Errorf("%s exited before it listened (log %s)", p.name, p.log)
	case <-time.After(timeout):
		return "", fmt.Errorf("%s did not listen within %s (log %s)", p.name, timeout, p.log)
	}
}

// kill sends SIGKILL to the current incarnation and waits for it to exit.
func (p *proc) kill() {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.killing = true
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
		panic(fmt.Sprintf("kill %s: %v", p.name, err))
	}
	<-done
	p.mu.Lock()
	p.killing = false
	p.mu.Unlock()
}

// problems lists what went wrong in the process by itself.
func (p *proc) problems() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for _, u := range p.unexpected {
		out = append(out, p.name+": "+u)
	}
	if p.races > 0 {
		out = append(out, fmt.Sprintf("%s: %d data races reported (log %s)", p.name, p.races, p.log))
	}
	for _, l := range p.panics {
		out = append(out, p.name+": "+l)
	}
	return out
}

// tail returns the last n lines of the process log.
func (p *proc) tail(n int) string {
	b, err := os.ReadFile(p.log)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// lineWriter writes to w and calls onLine for every complete line.
type lineWriter struct {
	w      *os.File
	onLine func([]byte)
	buf    []byte
}

func (l *lineWriter) Write(b []byte) (int, error) {
	n, err := l.w.Write(b)
	l.buf = append(l.buf, b...)
	for {
		i := bytes.IndexByte(l.buf, '\n')
		if i < 0 {
			break
		}
		l.onLine(l.buf[:i])
		l.buf = l.buf[i+1:]
	}
	if len(l.buf) > 1<<20 { // a line without end: keep memory bounded
		l.buf = nil
	}
	return n, err
}

func (l *lineWriter) flush() {
	if len(l.buf) > 0 {
		l.onLine(l.buf)
		l.buf = nil
	}
}
