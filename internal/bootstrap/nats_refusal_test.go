package bootstrap

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/nats-io/nats.go"
)

// A server that refuses the client's certificate may close the connection
// before the client reads its TLS alert (TLS 1.3): nats.go then reports
// the connection closed after the handshake, which is a refusal all the
// same, with the hint to the client certificate. A connection closed
// without TLS, or a TLS error of another kind, is not.
func TestClosedAfterHandshakeIsARefusal(t *testing.T) {
	t.Parallel()
	closed := func(cause error) error {
		return fmt.Errorf("%w: connection closed by remote after TLS handshake: %w", nats.ErrTLS, cause)
	}
	write := func(errno syscall.Errno) error {
		return &net.OpError{Op: "write", Net: "tcp", Err: &os.SyscallError{Syscall: "write", Err: errno}}
	}
	for _, tc := range []struct {
		name    string
		err     error
		refused bool
	}{
		{"read EOF", closed(io.EOF), true},
		{"write broken pipe", closed(write(syscall.EPIPE)), true},
		{"write reset", closed(write(syscall.ECONNRESET)), true},
		{"EOF without TLS", fmt.Errorf("nats: %w", io.EOF), false},
		{"another TLS error", fmt.Errorf("%w: %w", nats.ErrTLS, errors.New("handshake timed out")), false},
	} {
		refused, hint := connectFailure(tc.err, "")
		if refused != tc.refused {
			t.Errorf("%s: refused %v, want %v", tc.name, refused, tc.refused)
		}
		if tc.refused && !strings.Contains(hint, "--nats-cert") {
			t.Errorf("%s: hint %q does not name --nats-cert", tc.name, hint)
		}
	}
}
