package bootstrap

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/spf13/pflag"
)

// HTTPServer returns a server with the timeouts every fairway listener
// uses: slow headers and idle connections are cut; handlers that take long
// bodies (CSV uploads) extend their own read deadline.
func HTTPServer(h http.Handler, log *slog.Logger) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       2 * time.Minute,
		WriteTimeout:      2 * time.Minute,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
}

// ServerTLS names the certificate and key an HTTP listener serves HTTPS
// with. Both empty means plain HTTP, for loopback or behind a
// TLS-terminating proxy.
type ServerTLS struct {
	// CertFile is the PEM certificate, followed by any intermediates.
	CertFile string
	// KeyFile is the PEM private key of CertFile.
	KeyFile string
}

// RegisterFlags registers --tls-cert and --tls-key on fs, read from the
// environment variables envPrefix+"TLS_CERT" and envPrefix+"TLS_KEY" when
// not given.
func (s *ServerTLS) RegisterFlags(fs *pflag.FlagSet, envPrefix string) {
	fs.StringVar(&s.CertFile, "tls-cert", "", "PEM certificate (chain) to serve HTTPS with, together with --tls-key")
	fs.StringVar(&s.KeyFile, "tls-key", "", "PEM private key of --tls-cert")
	SetEnv(fs, "tls-cert", envPrefix+"TLS_CERT")
	SetEnv(fs, "tls-key", envPrefix+"TLS_KEY")
}

// Config loads the certificate and key for an http.Server's TLSConfig:
// nil when neither file is set, an error naming the flags when only one
// is or the pair does not load.
func (s ServerTLS) Config() (*tls.Config, error) {
	switch {
	case s.CertFile == "" && s.KeyFile == "":
		return nil, nil
	case s.CertFile == "" || s.KeyFile == "":
		return nil, errors.New("--tls-cert and --tls-key go together: set both to serve HTTPS, or neither")
	}
	cert, err := tls.LoadX509KeyPair(s.CertFile, s.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("--tls-cert %s, --tls-key %s: %w", s.CertFile, s.KeyFile, err)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, nil
}

// Serve runs srv on ln until ctx ends, then shuts it down gracefully: the
// listener closes at once and in-flight requests get up to grace to finish.
// With srv.TLSConfig set (ServerTLS.Config) it serves HTTPS, HTTP/2
// included.
func Serve(ctx context.Context, srv *http.Server, ln net.Listener, grace time.Duration) error {
	errc := make(chan error, 1)
	go func() {
		if srv.TLSConfig != nil {
			errc <- srv.ServeTLS(ln, "", "")
			return
		}
		errc <- srv.Serve(ln)
	}()
	select {
	case err := <-errc:
		return fmt.Errorf("http server: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), grace)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("http shutdown: %w", err)
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
