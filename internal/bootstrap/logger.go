package bootstrap

import (
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/spf13/pflag"
)

// LogConfig is how a fairway command logs: the same flags and environment
// variables in every binary.
type LogConfig struct {
	// Format (--log-format, FAIRWAY_LOG_FORMAT) is text or json. Default text.
	Format string
	// Level (--log-level, FAIRWAY_LOG_LEVEL) is debug, info, warn or error.
	// Default info for the services, warn for the fairway CLI.
	Level string
}

// RegisterFlags registers --log-format and --log-level on fs with the
// given default level, read from FAIRWAY_LOG_FORMAT and FAIRWAY_LOG_LEVEL
// when not given.
func (c *LogConfig) RegisterFlags(fs *pflag.FlagSet, level string) {
	fs.StringVar(&c.Format, "log-format", "text", "text or json")
	fs.StringVar(&c.Level, "log-level", level, "debug, info, warn or error")
	SetEnv(fs, "log-format", "FAIRWAY_LOG_FORMAT")
	SetEnv(fs, "log-level", "FAIRWAY_LOG_LEVEL")
}

// New returns the logger c describes, writing to w.
func (c LogConfig) New(w io.Writer) (*slog.Logger, error) {
	return NewLogger(w, c.Format, c.Level)
}

// NewLogger builds a slog logger writing text or JSON at the given level
// (debug, info, warn, error).
func NewLogger(w io.Writer, format, level string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(strings.ToUpper(level))); err != nil {
		return nil, fmt.Errorf("log level %q: want debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch format {
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	case "text", "":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	default:
		return nil, fmt.Errorf("log format %q: want text or json", format)
	}
}
