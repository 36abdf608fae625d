package bootstrap

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strings"
	"sync"
	"syscall"
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

// NATSConnectWait bounds how long a service waits at start for a NATS
// server that does not answer (ConnectNATS), so that a wrong address or a
// server that is not running yet ends the service within seconds, with
// the reason, rather than after a long silence.
const NATSConnectWait = 4 * time.Second

// natsDialTimeout bounds one connection attempt (the TCP and TLS
// handshakes and the server's answer to CONNECT).
const natsDialTimeout = 5 * time.Second

// Connect makes one attempt to connect to c's servers as client name, with
// c's credentials and TLS settings and then opts, and checks the server
// (CheckNATSServer): its version and JetStream.
func (c NATSConfig) Connect(name string, opts ...nats.Option) (*nats.Conn, error) {
	sec, err := c.Options()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), natsDialTimeout)
	defer cancel()
	nc, err := c.dial(ctx, name, append(sec, opts...))
	if err != nil {
		return nil, err
	}
	if err := CheckNATSServer(ctx, nc); err != nil {
		nc.Close()
		return nil, err
	}
	return nc, nil
}

// dial makes one connection attempt with opts (Options' and the caller's),
// giving up when ctx ends.
func (c NATSConfig) dial(ctx context.Context, name string, opts []nats.Option) (*nats.Conn, error) {
	urls := cmp.Or(c.URL, NATSURLDefault)
	timeout := natsDialTimeout
	if d, ok := ctx.Deadline(); ok {
		timeout = max(min(timeout, time.Until(d)), 100*time.Millisecond)
	}
	opts = append([]nats.Option{nats.Name(name), nats.Timeout(timeout)}, opts...)
	nc, err := nats.Connect(urls, opts...)
	if err != nil {
		_, hint := connectFailure(err, urls)
		return nil, fmt.Errorf("connect to NATS at %s: %w%s", RedactURL(urls), err, hint)
	}
	return nc, nil
}

// ConnectNATS connects to cfg's servers, checks the server
// (CheckNATSServer) and keeps reconnecting for ever, logging why the
// connection was lost and, when it changes or every 30 s, why reconnecting
// fails (the server's reason when it refuses the client). At start, a
// server that refuses the client (its credentials, permissions or
// certificate, or a certificate the client does not trust), that is too
// old or has no JetStream ends it at once; servers that do not answer are
// retried for NATSConnectWait (less if ctx ends sooner).
func ConnectNATS(ctx context.Context, cfg NATSConfig, name string, log *slog.Logger) (*nats.Conn, error) {
	opts, err := cfg.Options()
	if err != nil {
		return nil, err
	}
	rl := &reconnectLog{log: log, name: name}
	opts = append(opts,
		nats.MaxReconnects(-1),
		// nats.go stops reconnecting when a server refuses the same
		// credentials twice; a service keeps trying (the server's
		// configuration may be fixed while it runs) and logs why.
		nats.IgnoreAuthErrorAbort(),
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
		nats.ReconnectErrHandler(func(_ *nats.Conn, err error) { rl.failed(err) }),
		nats.ReconnectHandler(func(c *nats.Conn) {
			rl.reset()
			log.Info("nats reconnected", "name", name, "url", c.ConnectedUrlRedacted())
			if err := checkNATSVersion(c); err != nil {
				log.Error("nats reconnected to a server fairway cannot use", "name", name, "err", err)
			}
		}),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			switch {
			case isAuthError(err): // a server refusing a reconnect
				rl.failed(err)
			case errors.Is(err, nats.ErrSlowConsumer) && sub != nil:
				log.Warn("nats slow consumer: messages dropped", "name", name, "subject", sub.Subject, "err", err)
			default:
				log.Error("nats", "name", name, "err", err)
			}
		}),
	)
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, NATSConnectWait)
	defer cancel()
	for waited := false; ; waited = true {
		nc, err := cfg.dial(ctx, name, opts)
		if err == nil {
			checkCtx, cancelCheck := context.WithTimeout(parent, natsDialTimeout)
			defer cancelCheck()
			if err := CheckNATSServer(checkCtx, nc); err != nil {
				nc.Close()
				return nil, err
			}
			return nc, nil
		}
		if refused, _ := connectFailure(err, ""); refused {
			return nil, err
		}
		if !waited {
			log.Warn("nats not reachable yet; retrying", "name", name, "err", err, "for", NATSConnectWait)
		}
		select {
		case <-ctx.Done():
			if parent.Err() == nil {
				return nil, fmt.Errorf("%w (no server answered within %s: %w)", err, NATSConnectWait, ctx.Err())
			}
			return nil, fmt.Errorf("%w (%w)", err, ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// reconnectLog logs failed reconnection attempts: the first, then one
// whose reason differs from the last one logged, or every 30 s.
type reconnectLog struct {
	log  *slog.Logger
	name string

	mu       sync.Mutex
	last     string
	at       time.Time
	attempts int
}

const reconnectLogEvery = 30 * time.Second

func (r *reconnectLog) failed(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.attempts++
	if msg := err.Error(); msg != r.last || time.Since(r.at) >= reconnectLogEvery {
		r.log.Warn("nats reconnect failed; retrying", "name", r.name, "err", err, "attempts", r.attempts)
		r.last, r.at = msg, time.Now()
	}
}

func (r *reconnectLog) reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.last, r.at, r.attempts = "", time.Time{}, 0
}

func isAuthError(err error) bool {
	return errors.Is(err, nats.ErrAuthorization) || errors.Is(err, nats.ErrAuthExpired) ||
		errors.Is(err, nats.ErrAuthRevoked) || errors.Is(err, nats.ErrAccountAuthExpired)
}

// connectFailure classifies a failed connection attempt to urls. refused
// says whether a server answered and refused the client (authorization,
// TLS wanted or not offered, the client's certificate) or presented a
// certificate the client does not trust: retrying does not help, the
// configuration must change. hint gives the reason nats.go leaves out
// and names the settings to check, for the error message.
func connectFailure(err error, urls string) (refused bool, hint string) {
	var verify *tls.CertificateVerificationError
	var op *net.OpError
	switch {
	case errors.As(err, &verify):
		return true, " (--nats-ca, NATS_CA, names the CA that signed the server's certificate)"
	case errors.As(err, &op) && op.Op == "remote error", // a TLS alert from the server
		closedAfterHandshake(err):
		return true, " (the server refused the TLS handshake; one that verifies clients wants --nats-cert and --nats-key signed by its CA)"
	case isAuthError(err):
		return true, " (check --nats-creds, --nats-nkey or the user and password in --nats-url)"
	case errors.Is(err, nats.ErrSecureConnRequired), errors.Is(err, nats.ErrSecureConnWanted),
		errors.Is(err, nats.ErrNkeysNotSupported):
		return true, ""
	case errors.Is(err, nats.ErrNoServers):
		// nats.go reports a refused TCP connection as no servers at all.
		return false, unreachable(urls) + " (set NATS_URL or --nats-url)"
	}
	return false, ""
}

// closedAfterHandshake says the server closed the connection right after
// a completed TLS handshake. With TLS 1.3 the client finishes its side of
// the handshake before the server has checked the client's certificate,
// so a server that refuses it may close the connection before its alert
// is read: nats.go then reports the read's EOF or the next write's broken
// pipe or reset.
func closedAfterHandshake(err error) bool {
	return errors.Is(err, nats.ErrTLS) &&
		(errors.Is(err, io.EOF) || errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET))
}

// unreachable returns ": " and why a TCP connection to each of urls
// (comma-separated) fails, or "" when one succeeds or urls is empty.
func unreachable(urls string) string {
	var why []string
	for _, u := range strings.Split(urls, ",") {
		u = strings.TrimSpace(u)
		if u == "" {
			continue
		}
		if !strings.Contains(u, "://") {
			u = "nats://" + u
		}
		p, err := url.Parse(u)
		if err != nil || p.Hostname() == "" {
			continue
		}
		addr := net.JoinHostPort(p.Hostname(), cmp.Or(p.Port(), "4222"))
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			conn.Close()
			return ""
		}
		why = append(why, err.Error())
	}
	if len(why) == 0 {
		return ""
	}
	return ": " + strings.Join(why, "; ")
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
