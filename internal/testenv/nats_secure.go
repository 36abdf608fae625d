package testenv

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"
)

// NATSAuth is how a SecureNATS server authenticates its one user.
type NATSAuth int

const (
	// NATSAuthJWT runs the server in operator (JWT) mode with one account,
	// JetStream enabled; the user connects with a credentials file.
	NATSAuthJWT NATSAuth = iota
	// NATSAuthNkey lists the user in the server's configuration by its
	// public nkey; the user connects with its seed file.
	NATSAuthNkey
)

// SecureNATSServer is an embedded JetStream server that accepts TLS
// connections only, with a client certificate signed by TLS.CA, from one
// user.
type SecureNATSServer struct {
	*server.Server
	// TLS holds the server's CA and certificate and a client certificate
	// the server accepts.
	TLS TLSFiles
	// Creds (NATSAuthJWT) is the user's credentials file.
	Creds string
	// Nkey (NATSAuthNkey) is the user's seed file.
	Nkey string
}

// SecureNATS starts a SecureNATSServer on a free loopback port with its
// store in t.TempDir(), authenticating as auth says. It is shut down at
// cleanup. Its ClientURL is nats://; clients switch to TLS because the
// server requires it.
func SecureNATS(t testing.TB, auth NATSAuth) *SecureNATSServer {
	t.Helper()
	s := &SecureNATSServer{TLS: NewTLSFiles(t)}
	opts := natsOptions(t.TempDir())
	tc, err := server.GenTLSConfig(&server.TLSConfigOpts{
		CertFile: s.TLS.ServerCert, KeyFile: s.TLS.ServerKey, CaFile: s.TLS.CA, Verify: true,
	})
	if err != nil {
		t.Fatalf("embedded nats TLS: %v", err)
	}
	opts.TLSConfig, opts.TLSVerify, opts.TLSTimeout = tc, true, 5
	dir := t.TempDir()
	switch auth {
	case NATSAuthJWT:
		// JetStream needs a system account; the user's account has
		// JetStream without limits.
		op := newNkey(t, nkeys.CreateOperator)
		resolver := &server.MemAccResolver{}
		account := func(limits jwt.JetStreamLimits) nkeys.KeyPair {
			kp := newNkey(t, nkeys.CreateAccount)
			ac := jwt.NewAccountClaims(publicKey(t, kp))
			ac.Limits.JetStreamLimits = limits
			tok, err := ac.Encode(op)
			if err == nil {
				err = resolver.Store(publicKey(t, kp), tok)
			}
			if err != nil {
				t.Fatalf("embedded nats account: %v", err)
			}
			return kp
		}
		sys := account(jwt.JetStreamLimits{})
		acct := account(jwt.JetStreamLimits{MemoryStorage: -1, DiskStorage: -1, Streams: -1, Consumer: -1})
		opts.TrustedKeys, opts.AccountResolver, opts.SystemAccount = []string{publicKey(t, op)}, resolver, publicKey(t, sys)
		s.Creds = writeCreds(t, dir, acct)
	case NATSAuthNkey:
		user := newNkey(t, nkeys.CreateUser)
		opts.Nkeys = []*server.NkeyUser{{Nkey: publicKey(t, user)}}
		s.Nkey = writeSeed(t, dir, user)
	default:
		t.Fatalf("SecureNATS: unknown auth %d", auth)
	}
	s.Server = startNATS(t, opts)
	return s
}

// StrangerCreds writes a well-formed credentials file of a user of an
// account no server knows.
func StrangerCreds(t testing.TB) string {
	t.Helper()
	return writeCreds(t, t.TempDir(), newNkey(t, nkeys.CreateAccount))
}

// StrangerNkey writes the seed file of a user no server lists.
func StrangerNkey(t testing.TB) string {
	t.Helper()
	return writeSeed(t, t.TempDir(), newNkey(t, nkeys.CreateUser))
}

// writeCreds writes the credentials file of a new user of account acct.
func writeCreds(t testing.TB, dir string, acct nkeys.KeyPair) string {
	t.Helper()
	user := newNkey(t, nkeys.CreateUser)
	tok, err := jwt.NewUserClaims(publicKey(t, user)).Encode(acct)
	if err != nil {
		t.Fatal(err)
	}
	seed, err := user.Seed()
	if err != nil {
		t.Fatal(err)
	}
	creds, err := jwt.FormatUserConfig(tok, seed)
	if err != nil {
		t.Fatal(err)
	}
	return writeFile(t, dir, "user.creds", creds)
}

func writeSeed(t testing.TB, dir string, user nkeys.KeyPair) string {
	t.Helper()
	seed, err := user.Seed()
	if err != nil {
		t.Fatal(err)
	}
	return writeFile(t, dir, "user.nk", seed)
}

func writeFile(t testing.TB, dir, name string, data []byte) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func newNkey(t testing.TB, create func() (nkeys.KeyPair, error)) nkeys.KeyPair {
	t.Helper()
	kp, err := create()
	if err != nil {
		t.Fatal(err)
	}
	return kp
}

func publicKey(t testing.TB, kp nkeys.KeyPair) string {
	t.Helper()
	pub, err := kp.PublicKey()
	if err != nil {
		t.Fatal(err)
	}
	return pub
}
