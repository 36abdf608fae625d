package bootstrap

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
	"github.com/spf13/pflag"
)

// NATSURLDefault is the server a service connects to when neither
// --nats-url nor NATS_URL names one.
const NATSURLDefault = "nats://127.0.0.1:4222"

// NATSConfig says where NATS is and how a client proves who it is. Every
// field has a flag and an environment variable (RegisterFlags); the
// variables are those the nats CLI reads. Files are read at every
// connection, so a credentials file or certificate replaced on disk is used
// from the next reconnect on (an nkey seed file only with the same key:
// its public key is read once).
type NATSConfig struct {
	// URL (--nats-url, NATS_URL) lists the servers, comma-separated; it may
	// carry a user and password. Default NATSURLDefault.
	URL string
	// Creds (--nats-creds, NATS_CREDS) is a credentials file: a user JWT
	// and its nkey seed, for a server in operator (JWT) mode.
	Creds string
	// Nkey (--nats-nkey, NATS_NKEY) is a file holding a user nkey seed, for
	// a user the server's configuration lists by its public key.
	Nkey string
	// CA (--nats-ca, NATS_CA) holds the PEM certificates that may sign the
	// server's certificate; without it the system's roots are used. Setting
	// CA or Cert makes the client insist on TLS; a tls:// URL does too.
	CA string
	// Cert and Key (--nats-cert, --nats-key; NATS_CERT, NATS_KEY) are the
	// PEM client certificate and its key, for servers that verify clients
	// (verify: true in the server's tls block).
	Cert string
	Key  string
}

// RegisterFlags registers --nats-url, --nats-creds, --nats-nkey, --nats-ca,
// --nats-cert and --nats-key on fs, each read from its environment
// variable (SetEnv; the nats CLI's names) when not given.
func (c *NATSConfig) RegisterFlags(fs *pflag.FlagSet) {
	fs.StringVar(&c.URL, "nats-url", NATSURLDefault, "NATS server URLs, comma-separated; may carry user:password")
	fs.StringVar(&c.Creds, "nats-creds", "", "NATS credentials file: user JWT and nkey seed, for a server in operator mode")
	fs.StringVar(&c.Nkey, "nats-nkey", "", "file holding a NATS user nkey seed")
	fs.StringVar(&c.CA, "nats-ca", "", "PEM file of the CA certificates that sign the NATS server's certificate; implies TLS")
	fs.StringVar(&c.Cert, "nats-cert", "", "PEM client certificate for NATS servers that verify clients; implies TLS")
	fs.StringVar(&c.Key, "nats-key", "", "PEM private key of --nats-cert")
	for flag, env := range map[string]string{"nats-url": "NATS_URL", "nats-creds": "NATS_CREDS", "nats-nkey": "NATS_NKEY",
		"nats-ca": "NATS_CA", "nats-cert": "NATS_CERT", "nats-key": "NATS_KEY"} {
		SetEnv(fs, flag, env)
	}
}

// Options returns the nats.go options for c's credentials and TLS settings.
// It reads every file once, so that a missing or malformed one is reported
// at start, naming its flag and the file, instead of failing every
// connection attempt.
func (c NATSConfig) Options() ([]nats.Option, error) {
	var opts []nats.Option
	switch {
	case c.Creds != "" && c.Nkey != "":
		return nil, errors.New("--nats-creds and --nats-nkey are both set; give one")
	case c.Creds != "":
		if err := checkCreds(c.Creds); err != nil {
			return nil, fmt.Errorf("--nats-creds (NATS_CREDS): %w", err)
		}
		opts = append(opts, nats.UserCredentials(c.Creds))
	case c.Nkey != "":
		opt, err := nats.NkeyOptionFromSeed(c.Nkey)
		if err != nil {
			return nil, fmt.Errorf("--nats-nkey (NATS_NKEY) %s: %w", c.Nkey, err)
		}
		opts = append(opts, opt)
	}
	if (c.Cert == "") != (c.Key == "") {
		return nil, errors.New("--nats-cert and --nats-key (NATS_CERT, NATS_KEY) go together: set both or neither")
	}
	// nats.RootCAs and nats.ClientCert turn TLS on (1.2 at least). They
	// read their files when applied and again at every connection; applying
	// them here once reports a bad file now.
	if c.CA != "" {
		opt := nats.RootCAs(c.CA)
		if err := opt(&nats.Options{}); err != nil {
			return nil, fmt.Errorf("--nats-ca (NATS_CA): %w", err)
		}
		opts = append(opts, opt)
	}
	if c.Cert != "" {
		opt := nats.ClientCert(c.Cert, c.Key)
		if err := opt(&nats.Options{}); err != nil {
			return nil, fmt.Errorf("--nats-cert, --nats-key (NATS_CERT, NATS_KEY) %s, %s: %w", c.Cert, c.Key, err)
		}
		opts = append(opts, opt)
	}
	return opts, nil
}

// checkCreds reads a credentials file and checks that it holds a user JWT
// and a user nkey seed.
func checkCreds(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	tok, err := nkeys.ParseDecoratedJWT(b)
	if err == nil {
		_, err = jwt.DecodeUserClaims(tok)
	}
	if err != nil {
		return fmt.Errorf("%s holds no user JWT (want a .creds file as nsc writes it): %w", path, err)
	}
	kp, err := nkeys.ParseDecoratedUserNKey(b)
	if err != nil {
		return fmt.Errorf("%s holds no user nkey seed: %w", path, err)
	}
	kp.Wipe()
	return nil
}

// Connect makes one attempt to connect to c's servers as client name, with
// c's credentials and TLS settings and then opts.
func (c NATSConfig) Connect(name string, opts ...nats.Option) (*nats.Conn, error) {
	sec, err := c.Options()
	if err != nil {
		return nil, err
	}
	return c.dial(name, append(sec, opts...))
}

// dial makes one connection attempt with opts (Options' and the caller's).
func (c NATSConfig) dial(name string, opts []nats.Option) (*nats.Conn, error) {
	url := cmp.Or(c.URL, NATSURLDefault)
	opts = append([]nats.Option{nats.Name(name), nats.Timeout(5 * time.Second)}, opts...)
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		_, hint := connectFailure(err)
		return nil, fmt.Errorf("connect to NATS at %s: %w%s", RedactURL(url), err, hint)
	}
	return nc, nil
}

// ConnectNATS connects to cfg's servers and keeps reconnecting for ever,
// logging disconnects and reconnects. While no server answers, the first
// connection is retried until ctx ends, so a service can start before NATS
// does; a server that refuses the client (its credentials or certificate,
// or a certificate the client does not trust) ends it at once.
func ConnectNATS(ctx context.Context, cfg NATSConfig, name string, log *slog.Logger) (*nats.Conn, error) {
	opts, err := cfg.Options()
	if err != nil {
		return nil, err
	}
	opts = append(opts,
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250*time.Millisecond),
		nats.ReconnectJitter(250*time.Millisecond, time.Second),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			// err is nil when the connection closes on purpose (Close,
			// Drain at shutdown): nothing to warn about.
			if err == nil {
				log.Info("nats connection closed", "name", name)
				return
			}
			log.Warn("nats disconnected", "name", name, "err", err)
		}),
		nats.ReconnectHandler(func(c *nats.Conn) {
			log.Info("nats reconnected", "url", c.ConnectedUrlRedacted())
		}),
	)
	for waited := false; ; waited = true {
		nc, err := cfg.dial(name, opts)
		if err == nil {
			return nc, nil
		}
		if refused, _ := connectFailure(err); refused {
			return nil, err
		}
		if !waited {
			log.Warn("nats not reachable yet; retrying", "name", name, "err", err)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w (%w)", err, ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// connectFailure classifies a failed connection attempt. refused says
// whether a server answered and refused the client (authorization, TLS
// wanted or not offered, the client's certificate) or presented a
// certificate the client does not trust: retrying does not help, the
// configuration must change. hint names the settings to check, for the
// error message.
func connectFailure(err error) (refused bool, hint string) {
	var verify *tls.CertificateVerificationError
	var op *net.OpError
	switch {
	case errors.As(err, &verify):
		return true, " (--nats-ca, NATS_CA, names the CA that signed the server's certificate)"
	case errors.As(err, &op) && op.Op == "remote error": // a TLS alert from the server
		return true, " (the server refused the TLS handshake; one that verifies clients wants --nats-cert and --nats-key signed by its CA)"
	case errors.Is(err, nats.ErrAuthorization), errors.Is(err, nats.ErrAuthExpired),
		errors.Is(err, nats.ErrAuthRevoked), errors.Is(err, nats.ErrAccountAuthExpired):
		return true, " (check --nats-creds, --nats-nkey or the user and password in --nats-url)"
	case errors.Is(err, nats.ErrSecureConnRequired), errors.Is(err, nats.ErrSecureConnWanted),
		errors.Is(err, nats.ErrNkeysNotSupported):
		return true, ""
	case errors.Is(err, nats.ErrNoServers):
		return false, " (set NATS_URL or --nats-url)"
	}
	return false, ""
}

// DrainNATS drains nc and waits until it is closed, at most timeout:
// subscriptions stop, messages already delivered to them are handled, and
// what the connection buffered (acks, publishes) is flushed. nc.Drain alone
// returns at once and drains in the background, so a Close right after it
// (a deferred one, say) cut the drain short.
func DrainNATS(nc *nats.Conn, timeout time.Duration, log *slog.Logger) {
	if err := nc.Drain(); err != nil {
		log.Warn("nats drain", "name", nc.Opts.Name, "err", err)
		nc.Close()
		return
	}
	deadline := time.Now().Add(timeout)
	for !nc.IsClosed() {
		if time.Now().After(deadline) {
			log.Warn("nats drain did not finish; closing", "name", nc.Opts.Name, "after", timeout)
			nc.Close()
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}
