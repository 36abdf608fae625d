package bootstrap_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/fairwayhq/fairway/internal/bootstrap"
)

// testFlags is a small command line as a service registers it.
type testFlags struct {
	listen string
	n      int
	wait   time.Duration
	on     bool
	rules  []string
	nats   bootstrap.NATSConfig
	log    bootstrap.LogConfig
}

func newTestFlags(getenv func(string) string) (*pflag.FlagSet, *testFlags) {
	var c testFlags
	fs := pflag.NewFlagSet("svc", pflag.ContinueOnError)
	fs.StringVar(&c.listen, "listen", "127.0.0.1:1", "HTTP address")
	fs.IntVar(&c.n, "max-things", 5, "most things")
	fs.DurationVar(&c.wait, "wait", time.Second, "how long")
	fs.BoolVar(&c.on, "on", false, "switch")
	fs.Func("rule", "a rule; repeat, or separate with commas", func(v string) error {
		c.rules = append(c.rules, strings.Split(v, ",")...)
		return nil
	})
	c.nats.RegisterFlags(fs)
	c.log.RegisterFlags(fs, "info")
	bootstrap.BindEnv(fs, "FAIRWAY_SVC_", getenv)
	return fs, &c
}

var testCommand = bootstrap.Command{
	Name:    "svc",
	Summary: "svc does things.",
	EnvOnly: []bootstrap.EnvVar{{Name: "FAIRWAY_SECRET_KEY", Usage: "the key"}},
}

func parse(env map[string]string, args ...string) (*testFlags, string, error) {
	getenv := func(k string) string { return env[k] }
	fs, c := newTestFlags(getenv)
	var out bytes.Buffer
	err := testCommand.Parse(fs, args, getenv, &out)
	return c, out.String(), err
}

// A flag wins over its variable, a variable over the default; every flag
// has a variable, its own (prefix and name) or a shared one.
func TestFlagsFromEnvironment(t *testing.T) {
	t.Parallel()
	env := map[string]string{
		"FAIRWAY_SVC_LISTEN": ":9", "FAIRWAY_SVC_MAX_THINGS": "7", "FAIRWAY_SVC_WAIT": "1m", "FAIRWAY_SVC_ON": "true",
		"FAIRWAY_SVC_RULE": "a,b", "NATS_URL": "nats://env:4222", "FAIRWAY_LOG_LEVEL": "debug", "FAIRWAY_LOG_FORMAT": "json",
	}
	c, _, err := parse(env, "--max-things", "8", "--nats-url", "nats://flag:4222")
	if err != nil {
		t.Fatal(err)
	}
	if c.listen != ":9" || c.n != 8 || c.wait != time.Minute || !c.on || strings.Join(c.rules, " ") != "a b" ||
		c.nats.URL != "nats://flag:4222" || c.log != (bootstrap.LogConfig{Format: "json", Level: "debug"}) {
		t.Errorf("parsed %+v", c)
	}
	// A repeatable flag given on the command line replaces its variable.
	if c, _, err := parse(env, "--rule", "c", "--rule", "d"); err != nil || strings.Join(c.rules, " ") != "c d" {
		t.Errorf("--rule c --rule d with FAIRWAY_SVC_RULE set: %q, %v", c.rules, err)
	}
	c, _, err = parse(nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.listen != "127.0.0.1:1" || c.n != 5 || c.wait != time.Second || c.on || c.rules != nil ||
		c.nats.URL != bootstrap.NATSURLDefault || c.log != (bootstrap.LogConfig{Format: "text", Level: "info"}) {
		t.Errorf("defaults %+v", c)
	}
	_, _, err = parse(map[string]string{"FAIRWAY_SVC_MAX_THINGS": "many"})
	if err == nil || !strings.Contains(err.Error(), "FAIRWAY_SVC_MAX_THINGS") || !strings.Contains(err.Error(), "--max-things") {
		t.Errorf("a variable that does not parse: %v", err)
	}
}

// --help prints every flag with its variable, never a variable's value
// (a URL in it may carry a password), the environment-only variables,
// and returns ErrHelp; --version prints the version line.
func TestHelpAndVersion(t *testing.T) {
	t.Parallel()
	env := map[string]string{"NATS_URL": "nats://ingest:hunter2@n:4222", "FAIRWAY_SVC_LISTEN": "10.0.0.1:77", "FAIRWAY_SECRET_KEY": "s3cr3t-key"}
	_, out, err := parse(env, "--help")
	if !errors.Is(err, bootstrap.ErrHelp) {
		t.Fatalf("--help: %v", err)
	}
	for _, want := range []string{"Usage: svc [flags]", "svc does things.", "--listen", "(env FAIRWAY_SVC_LISTEN, set)", "(env FAIRWAY_SVC_MAX_THINGS)",
		"(env NATS_URL, set)", "(env NATS_CREDS)", "(env FAIRWAY_LOG_LEVEL)", "--help", "--version", "FAIRWAY_SECRET_KEY  the key (set)"} {
		if !strings.Contains(out, want) {
			t.Errorf("--help lacks %q:\n%s", want, out)
		}
	}
	for _, secret := range []string{"hunter2", "10.0.0.1", "s3cr3t"} {
		if strings.Contains(out, secret) {
			t.Errorf("--help shows %q from the environment:\n%s", secret, out)
		}
	}
	if _, out, err := parse(nil, "-h"); !errors.Is(err, bootstrap.ErrHelp) || !strings.Contains(out, "(not set)") {
		t.Errorf("-h: %v\n%s", err, out)
	}
	_, out, err = parse(nil, "--version")
	if !errors.Is(err, bootstrap.ErrVersion) || !strings.HasPrefix(out, "svc version ") || !strings.Contains(out, " commit ") {
		t.Errorf("--version: %v %q", err, out)
	}
}

// Flags take two dashes; a one-dash long flag names the right spelling,
// an unknown flag or a stray argument points to --help.
func TestParseErrors(t *testing.T) {
	t.Parallel()
	for args, want := range map[string]string{
		"-listen :1":     "flags take two dashes: --listen",
		"-max-things=3":  "flags take two dashes: --max-things=3",
		"--no-such-flag": "svc --help",
		"stray":          `unexpected arguments ["stray"]`,
	} {
		_, _, err := parse(nil, strings.Fields(args)...)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", args, err, want)
		}
	}
	// A negative value after a flag is a value, not a one-dash flag.
	if c, _, err := parse(nil, "--max-things", "-1"); err != nil || c.n != -1 {
		t.Errorf("--max-things -1: %v %v", c.n, err)
	}
}

// The services' default ports differ, and so do those of the sinks of
// different destinations; the sinks of any number of partners share a
// default that never collides (a free port).
func TestListenDefaultsDiffer(t *testing.T) {
	t.Parallel()
	seen := map[string]string{}
	for name, addr := range map[string]string{
		"ingest": bootstrap.IngestListenDefault, "dispatcher": bootstrap.DispatcherListenDefault, "serve": bootstrap.DashboardListenDefault,
		"sinks postgres": bootstrap.SinksListenDefault("postgres"), "sinks clickhouse": bootstrap.SinksListenDefault("clickhouse"),
	} {
		if addr == "" || strings.HasSuffix(addr, ":0") {
			t.Errorf("%s: %q, want a fixed port", name, addr)
		}
		if other, dup := seen[addr]; dup {
			t.Errorf("%s and %s both listen on %s", name, other, addr)
		}
		seen[addr] = name
	}
	if a, b := bootstrap.SinksListenDefault("b2b:erp"), bootstrap.SinksListenDefault("b2b:shop"); !strings.HasSuffix(a, ":0") || a != b {
		t.Errorf("b2b sinks listen on %q and %q, want a free port each", a, b)
	}
	// A sink kind without a port of its own gets a free port too, never
	// every interface.
	if a := bootstrap.SinksListenDefault("newkind"); a != bootstrap.SinksB2BListenDefault {
		t.Errorf("a kind without a port listens on %q, want %q", a, bootstrap.SinksB2BListenDefault)
	}
}
