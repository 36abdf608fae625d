package b2b_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fairwayhq/fairway/internal/sink"
	"github.com/fairwayhq/fairway/internal/sink/sinktest"
	"github.com/fairwayhq/fairway/pkg/events"
	"github.com/fairwayhq/fairway/sinks/b2b"
	"github.com/fairwayhq/fairway/sinks/b2b/b2btest"
)

// reader reads back what a receiver (an idempotent partner) holds.
type reader struct{ r *b2btest.Receiver }

func (r reader) Get(_ context.Context, tenant, productID string) (sinktest.State, bool, error) {
	st, ok := r.r.Get(tenant, productID)
	if !ok {
		return sinktest.State{}, false, nil
	}
	out := sinktest.State{Version: st.Version, Deleted: st.Op == string(events.OpDelete)}
	if !out.Deleted {
		out.Payload = st.Payload
	}
	return out, true, nil
}

func (r reader) CountEvents(_ context.Context, tenant string) (int, error) {
	return r.r.Products(tenant), nil
}

func TestConformance(t *testing.T) {
	t.Parallel()
	e := setup(t)
	tenants := []string{"acme"}
	for i := range 40 {
		tenants = append(tenants, fmt.Sprintf("tenant-%02d", i))
	}
	e.tenants(t, tenants...)
	sinktest.Run(t, sinktest.Harness{
		New: func(t *testing.T) (sink.Sink, sinktest.Reader) {
			rcv := e.receiver(t)
			name := e.partnerName()
			for _, tn := range tenants {
				e.partner(t, b2b.Partner{Tenant: tn, Name: name, URL: rcv.URL()})
			}
			return e.sink(t, name, b2b.Config{}), reader{rcv}
		},
		Poison: func(tenant string) events.Event {
			ev := sinktest.Upsert(tenant, "poison", 1)
			ev.Payload = json.RawMessage(`{"poison":true}`)
			return ev
		},
	})
}

// TestStatusCodes sends a one-event batch to a partner that answers with
// each status once, row by row.
func TestStatusCodes(t *testing.T) {
	t.Parallel()
	e := setup(t)
	const (
		ok        = "ok"
		transient = "transient batch error"
		permBatch = "permanent batch error"
		permRec   = "permanent record error"
		unknown   = "unknown batch error"
	)
	for _, tc := range []struct {
		status int
		want   string
	}{
		{200, ok}, {201, ok}, {202, ok}, {204, ok},
		{400, permRec}, {413, permRec}, {422, permRec},
		{401, permBatch}, {403, permBatch}, {404, permBatch}, {410, permBatch},
		{408, transient}, {425, transient}, {429, transient},
		{500, transient}, {502, transient}, {503, transient}, {504, transient}, {599, transient},
		// Any other status: unknown, retried up to the runtime's attempts.
		{301, unknown}, {307, unknown}, {409, unknown}, {418, unknown},
	} {
		t.Run(fmt.Sprint(tc.status), func(t *testing.T) {
			t.Parallel()
			s, rcv := e.simple(t, b2b.Partner{}, b2b.Config{})
			if tc.status != 200 {
				rcv.FailNext(1, b2btest.Failure{Status: tc.status, Body: []byte(`{"error":"told so"}`)})
			}
			errs, err := s.Apply(ctx(t), one("p1", 1))
			if n := rcv.Count(); n != 1 {
				t.Errorf("receiver got %d requests, want 1", n)
			}
			var he *b2b.HTTPError
			switch tc.want {
			case ok:
				if err != nil || errs[0] != nil {
					t.Fatalf("Apply = %v, %v; want success", errs, err)
				}
				return
			case permRec:
				if err != nil || !sink.IsPermanent(errs[0]) {
					t.Fatalf("Apply = %v, %v; want a permanent record error", errs, err)
				}
				err = errs[0]
			default:
				if err == nil {
					t.Fatalf("Apply = %v, nil; want a batch error", errs)
				}
				want := map[string]sink.Class{transient: sink.ClassTransient, permBatch: sink.ClassPermanent, unknown: sink.ClassUnknown}[tc.want]
				if got := sink.Classify(s, err); got.Class != want {
					t.Fatalf("Classify(%v) = %s by %q, want %s", err, got.Class, got.Rule, want)
				}
			}
			if !errors.As(err, &he) || he.Status != tc.status || he.Body != `{"error":"told so"}` {
				t.Fatalf("error %v: want an *HTTPError with status %d and the body", err, tc.status)
			}
			if !strings.Contains(err.Error(), fmt.Sprint(tc.status)) {
				t.Errorf("error %q does not name the status", err)
			}
		})
	}
}

func TestNetworkFailures(t *testing.T) {
	t.Parallel()
	e := setup(t)

	closedPort := func(t *testing.T) string {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		l.Close()
		return "http://" + addr + "/hook"
	}
	// resetting accepts connections and closes them at once with a RST.
	resetting := func(t *testing.T) string {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				_ = c.(*net.TCPConn).SetLinger(0)
				c.Close()
			}
		}()
		return "http://" + l.Addr().String() + "/hook"
	}
	// A peer that closes the connection shows as a reset, an EOF, or — when
	// the close wins the race with our write — a broken pipe.
	isReset := func(err error) bool {
		return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
	}
	for _, tc := range []struct {
		name    string
		url     func(t *testing.T, rcv *b2btest.Receiver) string
		timeout time.Duration
		check   func(error) bool
		inMsg   string
	}{
		{"ConnectionRefused", func(t *testing.T, _ *b2btest.Receiver) string { return closedPort(t) },
			0, func(err error) bool { return errors.Is(err, syscall.ECONNREFUSED) }, "connection refused"},
		{"AcceptAndClose", func(t *testing.T, _ *b2btest.Receiver) string { return resetting(t) },
			0, isReset, "POST http://127.0.0.1"},
		{"ResetAfterRequest", func(t *testing.T, rcv *b2btest.Receiver) string {
			rcv.FailAlways(b2btest.Failure{Reset: true})
			return rcv.URL()
		}, 0, isReset, "POST http://127.0.0.1"},
		{"Timeout", func(t *testing.T, rcv *b2btest.Receiver) string {
			rcv.FailAlways(b2btest.Failure{Hold: t.Context().Done()})
			return rcv.URL()
		}, 200 * time.Millisecond, func(err error) bool { return errors.Is(err, context.DeadlineExceeded) }, "no answer within the partner timeout 200ms"},
		{"GarbageNotHTTP", func(t *testing.T, rcv *b2btest.Receiver) string {
			rcv.FailAlways(b2btest.Failure{Garbage: []byte("\x00\x01\x02 this is not HTTP\r\n\r\n")})
			return rcv.URL()
		}, 0, func(err error) bool { return strings.Contains(err.Error(), "malformed HTTP") }, "malformed HTTP"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rcv := e.receiver(t)
			p := e.partner(t, b2b.Partner{Tenant: "acme", Name: e.partnerName(), URL: tc.url(t, rcv), Timeout: tc.timeout})
			s := e.sink(t, p.Name, b2b.Config{})
			err := batchErr(t, s, one("p1", 1))
			if got := sink.Classify(s, err); got.Class != sink.ClassTransient {
				t.Errorf("Classify(%v) = %s by %q, want transient", err, got.Class, got.Rule)
			}
			if !tc.check(err) {
				t.Errorf("error %v (%T) is not the expected kind", err, errors.Unwrap(err))
			}
			if !strings.Contains(err.Error(), tc.inMsg) {
				t.Errorf("error %q does not say %q", err, tc.inMsg)
			}
			if strings.Contains(err.Error(), testSecret) {
				t.Errorf("error %q contains the secret", err)
			}
		})
	}
}

func TestGarbageResponses(t *testing.T) {
	t.Parallel()
	e := setup(t)
	t.Run("EndlessErrorBody", func(t *testing.T) {
		t.Parallel()
		s, rcv := e.simple(t, b2b.Partner{}, b2b.Config{})
		rcv.FailNext(1, b2btest.Failure{Status: 500, Body: []byte("<html>oops"), EndlessBody: true})
		err := batchErr(t, s, one("p1", 1)) // returns only because the read is bounded
		var he *b2b.HTTPError
		if !errors.As(err, &he) || he.Status != 500 || len(he.Body) > b2b.MaxErrorBody || !he.Truncated || !strings.HasPrefix(he.Body, "<html>oops") {
			t.Fatalf("error %v: want a truncated 500 with at most %d bytes of body", err, b2b.MaxErrorBody)
		}
		if len(err.Error()) > 4*b2b.MaxErrorBody+200 {
			t.Fatalf("error message is %d bytes long", len(err.Error()))
		}
		mustApply(t, s, one("p1", 1)) // the partner recovered
	})
	t.Run("EndlessSuccessBody", func(t *testing.T) {
		t.Parallel()
		s, rcv := e.simple(t, b2b.Partner{}, b2b.Config{})
		rcv.FailNext(1, b2btest.Failure{Status: 200, Body: []byte("not json"), EndlessBody: true})
		mustApply(t, s, one("p1", 1))
	})
	t.Run("BinaryRejection", func(t *testing.T) {
		t.Parallel()
		s, rcv := e.simple(t, b2b.Partner{}, b2b.Config{})
		rcv.FailNext(1, b2btest.Failure{Status: 422, Body: []byte("\xff\xfe\x00bad\x1b[31m")})
		errs, err := s.Apply(ctx(t), one("p1", 1))
		if err != nil || !sink.IsPermanent(errs[0]) {
			t.Fatalf("Apply = %v, %v; want a permanent record error", errs, err)
		}
		msg := errs[0].Error()
		if !strings.Contains(msg, "422") || strings.ContainsAny(msg, "\x00\x1b") {
			t.Fatalf("record error %q: want the status and an escaped body", msg)
		}
	})
}

func TestRetryAfter(t *testing.T) {
	t.Parallel()
	e := setup(t)
	for _, tc := range []struct {
		name   string
		status int
		header func(now time.Time) string
		want   time.Duration
	}{
		{"Seconds429", 429, func(time.Time) string { return "30" }, 30 * time.Second},
		{"Seconds503", 503, func(time.Time) string { return "120" }, 2 * time.Minute},
		{"HTTPDate", 429, func(now time.Time) string { return now.Add(90 * time.Second).UTC().Format(http.TimeFormat) }, 90 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			clock := newClock()
			rcv := b2btest.New(t, b2btest.Options{Secret: []byte(testSecret), Clock: clock.Now})
			p := e.partner(t, b2b.Partner{Tenant: "acme", Name: e.partnerName(), URL: rcv.URL()})
			s := e.sink(t, p.Name, b2b.Config{Clock: clock.Now})
			rcv.FailNext(1, b2btest.Failure{Status: tc.status, RetryAfter: tc.header(clock.Now())})
			err := batchErr(t, s, one("p1", 1))
			var he *b2b.HTTPError
			if !errors.As(err, &he) || he.Wait != tc.want || he.RetryAfter() != tc.want {
				t.Fatalf("error %v: want an HTTPError with Wait %s", err, tc.want)
			}
			if got := sink.Classify(s, err); got.Class != sink.ClassTransient || got.RetryAfter != tc.want {
				t.Errorf("sink.Classify = %+v, want transient after %s", got, tc.want)
			}
			// No call while the Retry-After is in force, however often the
			// runtime asks.
			clock.Advance(tc.want - time.Second)
			for range 3 {
				err = batchErr(t, s, one("p1", 1))
				var ra *b2b.RetryAfterError
				if !errors.As(err, &ra) || !errors.Is(err, b2b.ErrRetryAfter) || ra.Wait != time.Second {
					t.Fatalf("Apply during Retry-After = %v, want a RetryAfterError waiting 1s", err)
				}
				if got := sink.Classify(s, err); got.Class != sink.ClassTransient || got.Rule != "b2b partner retry-after in force" || got.RetryAfter != time.Second {
					t.Fatalf("Apply during Retry-After = %v, not transient", err)
				}
			}
			if n := rcv.Count(); n != 1 {
				t.Fatalf("receiver got %d requests during Retry-After, want 1", n)
			}
			clock.Advance(time.Second)
			mustApply(t, s, one("p1", 1))
			if n := rcv.OK(); n != 1 {
				t.Fatalf("receiver accepted %d requests, want 1", n)
			}
		})
	}
}

func TestCircuitBreaker(t *testing.T) {
	t.Parallel()
	e := setup(t)
	const threshold, coolDown = 3, 30 * time.Second
	s, rcv := e.simple(t, b2b.Partner{}, b2b.Config{FailureThreshold: threshold, CoolDown: coolDown})
	rcv.FailAlways(b2btest.Failure{Status: 503})
	for i := range threshold {
		err := batchErr(t, s, one("p1", 1))
		if errors.Is(err, b2b.ErrCircuitOpen) {
			t.Fatalf("failure %d: circuit already open", i+1)
		}
		if want := b2b.BreakerClosed; i < threshold-1 && s.State() != want {
			t.Fatalf("after %d failures State = %v, want %v", i+1, s.State(), want)
		}
	}
	if s.State() != b2b.BreakerOpen {
		t.Fatalf("after %d failures State = %v, want open", threshold, s.State())
	}
	// Open: no request reaches the partner during the cool-down.
	for _, step := range []time.Duration{0, 10 * time.Second, 19 * time.Second} {
		e.clock.Advance(step)
		err := batchErr(t, s, one("p1", 1))
		var ra *b2b.RetryAfterError
		if !errors.Is(err, b2b.ErrCircuitOpen) || !errors.As(err, &ra) || ra.Wait <= 0 || ra.Wait > coolDown {
			t.Fatalf("Apply while open = %v, want ErrCircuitOpen with a wait in (0, %s]", err, coolDown)
		}
	}
	if n := rcv.Count(); n != threshold {
		t.Fatalf("receiver got %d requests, want %d (none while open)", n, threshold)
	}
	// Half-open: one probe; it fails, the circuit opens again.
	e.clock.Advance(time.Second)
	if st := s.State(); st != b2b.BreakerHalfOpen {
		t.Fatalf("after the cool-down State = %v, want half-open", st)
	}
	if err := batchErr(t, s, one("p1", 1)); errors.Is(err, b2b.ErrCircuitOpen) {
		t.Fatalf("probe did not go through: %v", err)
	}
	if n := rcv.Count(); n != threshold+1 {
		t.Fatalf("receiver got %d requests, want %d (one probe)", n, threshold+1)
	}
	if err := batchErr(t, s, one("p1", 1)); !errors.Is(err, b2b.ErrCircuitOpen) {
		t.Fatalf("after a failed probe Apply = %v, want ErrCircuitOpen", err)
	}
	// Next probe: held by the partner; concurrent calls do not go through.
	e.clock.Advance(coolDown)
	release := make(chan struct{})
	rcv.FailAlways(b2btest.Failure{Status: 200, Hold: release})
	probe := make(chan error, 1)
	go func() {
		_, err := s.Apply(context.Background(), one("p1", 1))
		probe <- err
	}()
	<-rcv.Held()
	if err := batchErr(t, s, one("p2", 1)); !errors.Is(err, b2b.ErrCircuitOpen) {
		t.Fatalf("Apply during the probe = %v, want ErrCircuitOpen", err)
	}
	close(release)
	if err := <-probe; err != nil {
		t.Fatalf("probe: %v", err)
	}
	rcv.Heal()
	if st := s.State(); st != b2b.BreakerClosed {
		t.Fatalf("after a good probe State = %v, want closed", st)
	}
	mustApply(t, s, one("p2", 1))
	if n := rcv.Count(); n != threshold+3 {
		t.Fatalf("receiver got %d requests, want %d", n, threshold+3)
	}
	// A refusal (4xx) is an answer: it does not count towards opening.
	rcv.FailAlways(b2btest.Failure{Status: 401})
	for range threshold + 2 {
		if err := batchErr(t, s, one("p1", 1)); errors.Is(err, b2b.ErrCircuitOpen) {
			t.Fatalf("4xx answers opened the circuit: %v", err)
		}
	}
	// Any other failing answer (409, a redirect: unknown to the
	// classification) counts, as a 5xx does.
	rcv.FailAlways(b2btest.Failure{Status: 409})
	for range threshold {
		batchErr(t, s, one("p1", 1))
	}
	if st := s.State(); st != b2b.BreakerOpen {
		t.Fatalf("state after %d answers 409: %v, want open", threshold, st)
	}
}

// TestPartnerIsolation: a partner that hangs or fails never slows another
// partner, nor the same partner of another tenant on another endpoint.
func TestPartnerIsolation(t *testing.T) {
	t.Parallel()
	e := setup(t)
	t.Run("OtherPartner", func(t *testing.T) {
		t.Parallel()
		sa, ra := e.simple(t, b2b.Partner{}, b2b.Config{FailureThreshold: 2})
		sb, rb := e.simple(t, b2b.Partner{}, b2b.Config{})
		ra.FailAlways(b2btest.Failure{Status: 503, Hold: t.Context().Done()})
		// Partner A hangs on its first request...
		doneA := make(chan error, 1)
		go func() {
			_, err := sa.Apply(context.Background(), one("p1", 1))
			doneA <- err
		}()
		<-ra.Held()
		// ...while partner B takes every batch at once.
		for i := range 50 {
			mustApply(t, sb, one(fmt.Sprintf("p%d", i), 1))
		}
		if n := rb.OK(); n != 50 {
			t.Fatalf("partner B accepted %d requests, want 50", n)
		}
		select {
		case err := <-doneA:
			t.Fatalf("partner A's request ended (%v) before it was released", err)
		default:
		}
		ra.FailAlways(b2btest.Failure{Status: 503})
	})
	t.Run("SamePartnerOtherTenant", func(t *testing.T) {
		t.Parallel()
		down, up := e.receiver(t), e.receiver(t)
		name := e.partnerName()
		e.partner(t, b2b.Partner{Tenant: "t-down", Name: name, URL: down.URL()})
		e.partner(t, b2b.Partner{Tenant: "t-up", Name: name, URL: up.URL()})
		s := e.sink(t, name, b2b.Config{FailureThreshold: 2})
		down.FailAlways(b2btest.Failure{Status: 503})
		for range 2 {
			batchErr(t, s, sinktest.Records(sinktest.Upsert("t-down", "p1", 1)))
		}
		if err := batchErr(t, s, sinktest.Records(sinktest.Upsert("t-down", "p1", 1))); !errors.Is(err, b2b.ErrCircuitOpen) {
			t.Fatalf("t-down: %v, want ErrCircuitOpen", err)
		}
		for i := range 20 {
			errs, err := s.Apply(ctx(t), sinktest.Records(sinktest.Upsert("t-up", fmt.Sprint(i), 1)))
			if err != nil || errs[0] != nil {
				t.Fatalf("t-up batch %d: %v %v", i, errs, err)
			}
		}
		if n := up.OK(); n != 20 {
			t.Fatalf("t-up's endpoint accepted %d, want 20", n)
		}
		if n := down.Count(); n != 2 {
			t.Fatalf("t-down's endpoint got %d requests, want 2", n)
		}
		var open int
		for _, b := range s.Breakers() {
			if b.State == b2b.BreakerOpen {
				open++
			}
		}
		if open != 1 || len(s.Breakers()) != 2 {
			t.Fatalf("Breakers() = %+v, want two endpoints, one open", s.Breakers())
		}
	})
}

func TestRequestHeadersAndIdempotency(t *testing.T) {
	t.Parallel()
	e := setup(t)
	s, rcv := e.simple(t, b2b.Partner{}, b2b.Config{UserAgent: "fairway/test"})
	batch := sinktest.Records(sinktest.Upsert("acme", "p1", 1), sinktest.Delete("acme", "p2", 2))
	rcv.FailNext(1, b2btest.Failure{Status: 503})
	batchErr(t, s, batch)
	e.clock.Advance(time.Minute) // a later retry: a new timestamp, the same key
	mustApply(t, s, batch)
	reqs := rcv.Requests()
	if len(reqs) != 2 {
		t.Fatalf("receiver kept %d requests, want 2", len(reqs))
	}
	for i, r := range reqs {
		if r.SignatureErr != nil {
			t.Errorf("request %d: signature: %v", i, r.SignatureErr)
		}
		if got := r.Header.Get("User-Agent"); got != "fairway/test" {
			t.Errorf("request %d: User-Agent %q", i, got)
		}
		if got := r.Header.Get("Content-Type"); got != "application/json" {
			t.Errorf("request %d: Content-Type %q", i, got)
		}
	}
	k0, k1 := reqs[0].Header.Get(b2b.HeaderWebhookID), reqs[1].Header.Get(b2b.HeaderWebhookID)
	if k0 == "" || k0 != k1 {
		t.Fatalf("webhook-id %q then %q, want one stable key", k0, k1)
	}
	if reqs[0].Header.Get(b2b.HeaderWebhookTimestamp) == reqs[1].Header.Get(b2b.HeaderWebhookTimestamp) {
		t.Fatalf("both requests signed at the same time")
	}
	if !bytes.Equal(reqs[0].Body, reqs[1].Body) {
		t.Fatalf("retry body differs")
	}
	var body b2b.Body
	if err := json.Unmarshal(reqs[1].Body, &body); err != nil {
		t.Fatal(err)
	}
	if body.Tenant != "acme" || len(body.Events) != 2 || body.Events[0].Seq != 1 || body.Events[1].Op != events.OpDelete || body.Events[1].Payload != nil {
		t.Fatalf("body = %s", reqs[1].Body)
	}
	// Other events, other key.
	mustApply(t, s, sinktest.Records(sinktest.Upsert("acme", "p3", 1)))
	if k := rcv.Requests()[2].Header.Get(b2b.HeaderWebhookID); k == k0 {
		t.Fatalf("a different batch reused key %q", k)
	}
	// A partner with another secret refuses the signature: permanent.
	other := b2btest.New(t, b2btest.Options{Secret: []byte("another-secret-of-the-partner"), Clock: e.clock.Now})
	p := e.partner(t, b2b.Partner{Tenant: "acme", Name: e.partnerName(), URL: other.URL()})
	ws := e.sink(t, p.Name, b2b.Config{})
	err := batchErr(t, ws, one("p1", 1))
	if sink.Classify(ws, err).Class != sink.ClassPermanent || other.BadSignatures() != 1 {
		t.Fatalf("wrong secret: %v (bad signatures %d), want permanent 401", err, other.BadSignatures())
	}
}

func TestSplitByMaxRequestSize(t *testing.T) {
	t.Parallel()
	e := setup(t)
	const max = 4096
	s, rcv := e.simple(t, b2b.Partner{MaxRequestBytes: max}, b2b.Config{})
	var evs []events.Event
	for i := range 100 {
		evs = append(evs, sinktest.Upsert("acme", fmt.Sprintf("p%03d", i), 1))
	}
	big := sinktest.Upsert("acme", "big", 1)
	big.Payload = json.RawMessage(`{"blob":"` + strings.Repeat("x", max) + `"}`)
	evs = append(evs[:50], append([]events.Event{big}, evs[50:]...)...)
	errs, err := s.Apply(ctx(t), sinktest.Records(evs...))
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range errs {
		if (i == 50) != (e != nil) {
			t.Fatalf("record %d: %v", i, e)
		}
	}
	if !errors.Is(errs[50], b2b.ErrEventTooLarge) || !sink.IsPermanent(errs[50]) {
		t.Fatalf("big event: %v, want permanent ErrEventTooLarge", errs[50])
	}
	reqs := rcv.Requests()
	if len(reqs) < 100*150/max {
		t.Fatalf("%d requests for 100 events of ~150 bytes under %d bytes; not split", len(reqs), max)
	}
	for i, r := range reqs {
		if len(r.Body) > max {
			t.Errorf("request %d is %d bytes, max %d", i, len(r.Body), max)
		}
	}
	if n := rcv.Products("acme"); n != 100 || rcv.Accepted() != 100 {
		t.Fatalf("receiver holds %d products from %d events, want 100", n, rcv.Accepted())
	}
}

func TestOpFilter(t *testing.T) {
	t.Parallel()
	e := setup(t)
	s, rcv := e.simple(t, b2b.Partner{Ops: []events.Op{events.OpUpsert}}, b2b.Config{})
	batch := sinktest.Records(sinktest.Upsert("acme", "p1", 1), sinktest.Delete("acme", "p2", 1), sinktest.Delete("acme", "p1", 2))
	mustApply(t, s, batch)
	if rcv.Accepted() != 1 {
		t.Fatalf("receiver got %d events, want only the upsert", rcv.Accepted())
	}
	if st, ok := rcv.Get("acme", "p1"); !ok || st.Version != 1 || st.Op != "upsert" {
		t.Fatalf("p1 = %+v, %v", st, ok)
	}
	// Only deletes: nothing to send, everything applied, no request.
	mustApply(t, s, sinktest.Records(sinktest.Delete("acme", "p3", 1)))
	if n := rcv.Count(); n != 1 {
		t.Fatalf("receiver got %d requests, want 1", n)
	}
}

func TestPartnerDisabledAndUnknown(t *testing.T) {
	t.Parallel()
	e := setup(t)
	s, rcv := e.simple(t, b2b.Partner{}, b2b.Config{PartnerCacheTTL: 10 * time.Second})
	name := strings.TrimPrefix(s.Name(), "b2b:")
	if err := e.reg.SetEnabled(ctx(t), "acme", name, false); err != nil {
		t.Fatal(err)
	}
	err := batchErr(t, s, one("p1", 1))
	if got := sink.Classify(s, err); !errors.Is(err, b2b.ErrPartnerDisabled) || got.Class != sink.ClassTransient || got.Rule != "b2b partner disabled" {
		t.Fatalf("disabled: %v, want transient ErrPartnerDisabled", err)
	}
	if err := e.reg.SetEnabled(ctx(t), "acme", name, true); err != nil {
		t.Fatal(err)
	}
	batchErr(t, s, one("p1", 1)) // cached for PartnerCacheTTL
	e.clock.Advance(10 * time.Second)
	mustApply(t, s, one("p1", 1))
	if rcv.Count() != 1 {
		t.Fatalf("receiver got %d requests, want 1", rcv.Count())
	}
	// A tenant without the partner: its records are dead-lettered with a
	// reason, other tenants' records go through.
	e.tenants(t, "stranger")
	errs, err := s.Apply(ctx(t), sinktest.Records(sinktest.Upsert("stranger", "x", 1), sinktest.Upsert("acme", "p2", 1)))
	if err != nil || !errors.Is(errs[0], b2b.ErrUnknownPartner) || sink.Classify(s, errs[0]).Class != sink.ClassPermanent || errs[1] != nil {
		t.Fatalf("Apply = %v, %v; want [permanent unknown partner, nil]", errs, err)
	}
}

func TestTLS(t *testing.T) {
	t.Parallel()
	e := setup(t)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if b2b.SigningDefault.Verify([]byte(testSecret), r.Header, must(io.ReadAll(r.Body)), e.clock.Now(), time.Minute) != nil {
			w.WriteHeader(401)
		}
	}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshakes
	srv.StartTLS()
	t.Cleanup(srv.Close)
	p := e.partner(t, b2b.Partner{Tenant: "acme", Name: e.partnerName(), URL: srv.URL})
	// Certificates are verified: the test server's is not trusted...
	untrusting := e.sink(t, p.Name, b2b.Config{})
	err := batchErr(t, untrusting, one("p1", 1))
	if got := sink.Classify(untrusting, err); !strings.Contains(err.Error(), "certificate") || got.Class != sink.ClassTransient || got.Rule != "tls certificate not trusted" {
		t.Fatalf("untrusted certificate: %v (%s by %q), want a transient certificate error", err, got.Class, got.Rule)
	}
	// ...unless its CA is given.
	roots := x509.NewCertPool()
	roots.AddCert(srv.Certificate())
	mustApply(t, e.sink(t, p.Name, b2b.Config{TLSConfig: &tls.Config{RootCAs: roots, InsecureSkipVerify: true}}), one("p1", 1))
	// InsecureSkipVerify is ignored: an untrusted certificate still fails.
	err = batchErr(t, e.sink(t, p.Name, b2b.Config{TLSConfig: &tls.Config{InsecureSkipVerify: true}}), one("p1", 1))
	if !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("InsecureSkipVerify honoured: %v", err)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// TestSecretsNeverShown provokes logs and errors of every kind and checks
// that neither the secret nor a token in the partner URL appears.
func TestSecretsNeverShown(t *testing.T) {
	t.Parallel()
	e := setup(t)
	var logs bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	rcv := e.receiver(t)
	const token = "url-token-TOPSECRET"
	p := e.partner(t, b2b.Partner{Tenant: "acme", Name: e.partnerName(), URL: rcv.URL() + "?token=" + token})
	s := e.sink(t, p.Name, b2b.Config{Logger: logger, FailureThreshold: 2})
	var msgs []string
	for _, f := range []b2btest.Failure{{Status: 401}, {Status: 422}, {Status: 503}, {Reset: true}, {Status: 503}, {}} {
		rcv.FailNext(1, f)
		errs, err := s.Apply(ctx(t), one("p1", 1))
		msgs = append(msgs, fmt.Sprint(err), fmt.Sprint(errs))
	}
	full, err := e.reg.Get(ctx(t), "acme", p.Name)
	if err != nil {
		t.Fatal(err)
	}
	js, _ := json.Marshal(full)
	logger.Info("partner", "p", full, "secret", full.Secret)
	msgs = append(msgs, fmt.Sprintf("%v %+v %#v %s", full, full, full, full.Secret), logs.String())
	if strings.Contains(string(js), testSecret) {
		t.Fatalf("JSON of a partner shows the secret: %s", js)
	}
	if !strings.Contains(logs.String(), "circuit opened") {
		t.Fatalf("no breaker log line; logs:\n%s", logs.String())
	}
	for _, m := range msgs {
		if strings.Contains(m, testSecret) || strings.Contains(m, token) {
			t.Fatalf("secret or URL token shown in %q", m)
		}
	}
	if string(full.Secret) != testSecret {
		t.Fatalf("Get returned the wrong secret")
	}
}
