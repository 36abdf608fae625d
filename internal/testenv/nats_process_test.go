package testenv_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fairwayhq/fairway/internal/testenv"
)

// TestNATSProcess checks the server NATSProcess runs in a child process
// (with the environment it was given):
// it serves JetStream from the directory given, is another process than
// this one, reports its CPU time, keeps its store across a restart on the
// same directory, writes a CPU profile when asked, and is gone after Stop
// (a second Stop does nothing).
func TestNATSProcess(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()

	c := testenv.NATSProcess(t, dir, "GOGC=400")
	if c.PID == os.Getpid() || c.PID <= 0 {
		t.Fatalf("child pid %d, this process %d", c.PID, os.Getpid())
	}
	environ, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", c.PID))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(strings.Split(string(environ), "\x00"), "GOGC=400") {
		t.Errorf("the child's environment lacks GOGC=400")
	}
	nc, err := nats.Connect(c.URL)
	if err != nil {
		t.Fatalf("connect %s: %v", c.URL, err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "T", Subjects: []string{"t.>"}, Storage: jetstream.FileStorage}); err != nil {
		t.Fatalf("create stream: %v", err)
	}
	for range 1000 {
		if _, err := js.Publish(ctx, "t.x", []byte("payload")); err != nil {
			t.Fatalf("publish: %v", err)
		}
	}
	profDir := t.TempDir()
	t.Setenv("FAIRWAY_BENCH_PROFILE_DIR", profDir)
	stopProfile := c.ProfileCPU(t, "server")
	for range 100 {
		if _, err := js.Publish(ctx, "t.x", []byte("payload")); err != nil {
			t.Fatalf("publish: %v", err)
		}
	}
	stopProfile()
	if fi, err := os.Stat(filepath.Join(profDir, "server.prof")); err != nil || fi.Size() == 0 {
		t.Fatalf("the child's CPU profile: %v (err %v), want a non-empty file", fi, err)
	}
	if _, err := c.CPU(); err != nil {
		t.Fatalf("CPU: %v", err)
	}
	if entries, err := os.ReadDir(dir); err != nil || len(entries) == 0 {
		t.Fatalf("store %s: %v entries, err %v; want the child's JetStream files there", dir, entries, err)
	}
	nc.Close()
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := c.Stop(); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	if _, err := os.Stat("/proc/" + strconv.Itoa(c.PID)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("child %d still exists after Stop (stat err %v)", c.PID, err)
	}
	if _, err := nats.Connect(c.URL, nats.Timeout(time.Second)); err == nil {
		t.Fatalf("%s still answers after Stop", c.URL)
	}

	// A new child on the same directory finds the stream and its messages.
	c2 := testenv.NATSProcess(t, dir)
	nc2, err := nats.Connect(c2.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc2.Close()
	js2, err := jetstream.New(nc2)
	if err != nil {
		t.Fatal(err)
	}
	s, err := js2.Stream(ctx, "T")
	if err != nil {
		t.Fatalf("stream after restart: %v", err)
	}
	if n := s.CachedInfo().State.Msgs; n != 1100 {
		t.Fatalf("stream after restart holds %d messages, want 1100", n)
	}
}
