package bootstrap

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/pflag"
)

// envAnnotation is the pflag annotation that names a flag's environment
// variable (SetEnv, BindEnv); ApplyEnv reads it.
const envAnnotation = "fairway-env"

// ErrHelp and ErrVersion are what Command.Parse returns after printing
// the help or the version: the command exits 0 without running.
var (
	ErrHelp    = pflag.ErrHelp
	ErrVersion = errors.New("version requested")
)

// SetEnv names the environment variable of flag name on fs. BindEnv gives
// every other flag a variable named after its prefix; SetEnv is for the
// variables several commands share (DATABASE_URL, NATS_URL,
// FAIRWAY_LOG_LEVEL, …). It panics if fs has no such flag: that is a
// programming error.
func SetEnv(fs *pflag.FlagSet, name, env string) {
	f := fs.Lookup(name)
	if f == nil {
		panic("bootstrap.SetEnv: no flag --" + name)
	}
	if f.Annotations == nil {
		f.Annotations = map[string][]string{}
	}
	f.Annotations[envAnnotation] = []string{env}
}

// EnvOf returns the environment variable of f, "" if it has none.
func EnvOf(f *pflag.Flag) string {
	if v := f.Annotations[envAnnotation]; len(v) == 1 {
		return v[0]
	}
	return ""
}

// BindEnv gives every flag of fs an environment variable and names it at
// the end of the flag's help: SetEnv's name, or prefix followed by the
// flag name in upper case with '_' for '-' (prefix FAIRWAY_INGEST_ and
// --max-events: FAIRWAY_INGEST_MAX_EVENTS). A variable set in the
// environment (as getenv reads it now) shows as "(env NAME, set)": its
// value never appears in --help, since it may hold a password. With an
// empty prefix every flag must have its variable from SetEnv. Call it once
// per flag set, after registering the flags and before parsing.
func BindEnv(fs *pflag.FlagSet, prefix string, getenv func(string) string) {
	fs.VisitAll(func(f *pflag.Flag) {
		env := EnvOf(f)
		if env == "" {
			if prefix == "" {
				panic("bootstrap.BindEnv: flag --" + f.Name + " has no environment variable")
			}
			env = prefix + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
			SetEnv(fs, f.Name, env)
		}
		if getenv(env) != "" {
			f.Usage += fmt.Sprintf(" (env %s, set)", env)
		} else {
			f.Usage += fmt.Sprintf(" (env %s)", env)
		}
	})
}

// ApplyEnv sets every flag of fs that the command line did not give from
// its environment variable, if that is set: a flag wins over its variable,
// a variable over the built-in default. A value that does not parse is an
// error naming the variable (and not the value, which may be a secret).
// A repeatable flag (one registered with Func) gets the variable's value
// in one call.
func ApplyEnv(fs *pflag.FlagSet, getenv func(string) string) error {
	var errs []error
	fs.VisitAll(func(f *pflag.Flag) {
		env := EnvOf(f)
		if env == "" || f.Changed {
			return
		}
		v := getenv(env)
		if v == "" {
			return
		}
		if err := fs.Set(f.Name, v); err != nil {
			errs = append(errs, fmt.Errorf("%s (for --%s): %w", env, f.Name, err))
		}
	})
	return errors.Join(errs...)
}

// Changed says whether flag name was given, on the command line or by its
// environment variable (after ApplyEnv).
func Changed(fs *pflag.FlagSet, name string) bool {
	f := fs.Lookup(name)
	return f != nil && f.Changed
}

// Command describes a service binary for its --help and --version.
type Command struct {
	// Name is the binary's name: ingest, dispatcher, sinks.
	Name string
	// Summary is the paragraph --help prints above the flags.
	Summary string
	// Notes follow the flags in --help: settings that need more than a
	// flag's line.
	Notes string
	// EnvOnly lists variables the command reads without a flag (secrets
	// kept off the command line, where ps and shell history show them).
	EnvOnly []EnvVar
}

// EnvVar is a variable a command reads without a flag.
type EnvVar struct {
	Name, Usage string
}

// Parse parses args into fs as every fairway service does: flags take two
// dashes (a one-dash long flag is an error that names the right
// spelling), --help prints the help to out and returns ErrHelp, --version
// prints Version(c.Name) to out and returns ErrVersion, and every flag not
// given is set from its environment variable (BindEnv, ApplyEnv). Stray
// arguments are an error.
func (c Command) Parse(fs *pflag.FlagSet, args []string, getenv func(string) string, out io.Writer) error {
	var help, version bool
	fs.BoolVarP(&help, "help", "h", false, "print this help and exit")
	fs.BoolVar(&version, "version", false, "print the version and commit and exit")
	fs.SetOutput(io.Discard) // errors are returned, help printed below
	if err := oneDashLongFlag(fs, args); err != nil {
		return err
	}
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%w (%s --help lists the flags)", err, c.Name)
	}
	switch {
	case help:
		c.printHelp(fs, getenv, out)
		return ErrHelp
	case version:
		fmt.Fprintln(out, Version(c.Name))
		return ErrVersion
	case fs.NArg() > 0:
		return fmt.Errorf("unexpected arguments %q (%s --help lists the flags)", fs.Args(), c.Name)
	}
	return ApplyEnv(fs, getenv)
}

func (c Command) printHelp(fs *pflag.FlagSet, getenv func(string) string, out io.Writer) {
	fmt.Fprintf(out, "Usage: %s [flags]\n\n%s\n\nFlags (each also read from the environment variable it names; a flag wins):\n%s",
		c.Name, strings.TrimSpace(c.Summary), fs.FlagUsages())
	if len(c.EnvOnly) > 0 {
		fmt.Fprintln(out, "\nEnvironment only:")
		for _, v := range c.EnvOnly {
			set := "not set"
			if getenv(v.Name) != "" {
				set = "set"
			}
			fmt.Fprintf(out, "  %s  %s (%s)\n", v.Name, v.Usage, set)
		}
	}
	if c.Notes != "" {
		fmt.Fprintf(out, "\n%s\n", strings.TrimSpace(c.Notes))
	}
}

// oneDashLongFlag finds a long flag given with one dash (-listen), which
// pflag would read as the short flags l, i, s, …, and names the
// two-dash spelling.
func oneDashLongFlag(fs *pflag.FlagSet, args []string) error {
	for _, a := range args {
		if a == "--" {
			return nil
		}
		if len(a) < 3 || a[0] != '-' || a[1] == '-' {
			continue
		}
		name, _, _ := strings.Cut(a[1:], "=")
		if fs.Lookup(name) != nil {
			return fmt.Errorf("%s: flags take two dashes: --%s", a, a[1:])
		}
	}
	return nil
}
