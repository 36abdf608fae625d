package b2b_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fairwayhq/fairway/internal/sink"
	"github.com/fairwayhq/fairway/sinks/b2b"
	"github.com/fairwayhq/fairway/sinks/b2b/b2btest"
)

// rotation is what a partner on signing received around a secret
// rotation, captured by a real receiver that verifies with the first
// secret.
type rotation struct {
	old, new b2b.Secret
	// first is a request the partner refused with 503 and retry its
	// retry, both before the rotation; during is sent while the old
	// secret still signs, after once the overlap is over.
	first, retry, during, after b2btest.Request
}

// rotate runs the sink for a partner on signing through a rotation: a
// refused request and its retry, RotateSecret with a one-minute overlap, a
// request during the overlap and one after it. The clock moves about a
// minute in all, so the captured timestamps stay within the tolerance of
// verifiers that read the real clock.
func rotate(t *testing.T, e *env, signing b2b.Signing) rotation {
	t.Helper()
	r := rotation{old: b2b.GenerateSecret(), new: b2b.GenerateSecret()}
	rcv := b2btest.New(t, b2btest.Options{Signing: signing, Secret: r.old, Clock: e.clock.Now, KeepRequests: true})
	p := e.partner(t, b2b.Partner{Tenant: "acme", Name: e.partnerName(), URL: rcv.URL(), Signing: signing, Secret: r.old})
	s := e.sink(t, p.Name, b2b.Config{})

	// Each batch has the next stream sequence, as the stream gives them.
	seq := uint64(0)
	next := func(id string) []sink.Record {
		seq++
		batch := one(id, 1)
		batch[0].Seq = seq
		return batch
	}
	rcv.FailNext(1, b2btest.Failure{Status: http.StatusServiceUnavailable})
	batch := next("p1")
	batchErr(t, s, batch)
	e.clock.Advance(2 * time.Second)
	mustApply(t, s, batch)

	if _, err := e.reg.RotateSecret(ctx(t), "acme", p.Name, r.new, e.clock.Now().Add(time.Minute)); err != nil {
		t.Fatalf("RotateSecret: %v", err)
	}
	e.clock.Advance(b2b.PartnerCacheTTLDefault) // the sink reads the partner again
	mustApply(t, s, next("p2"))

	// The receiver still verifies with the old secret, which no longer
	// signs: it refuses the request.
	e.clock.Advance(time.Minute)
	if err := batchErr(t, s, next("p3")); sink.Classify(s, err).Class != sink.ClassPermanent {
		t.Fatalf("after the overlap: %v, want a permanent 401 from a receiver on the old secret", err)
	}

	reqs := rcv.Requests()
	if len(reqs) != 4 {
		t.Fatalf("receiver kept %d requests, want 4", len(reqs))
	}
	for i, want := range []int{503, 200, 200, 401} {
		if reqs[i].Status != want {
			t.Fatalf("request %d answered %d (%v), want %d", i, reqs[i].Status, reqs[i].SignatureErr, want)
		}
	}
	r.first, r.retry, r.during, r.after = reqs[0], reqs[1], reqs[2], reqs[3]
	return r
}

// TestSigningOnTheWire checks each scheme's requests around a rotation
// with the scheme's own Verify: the scheme's headers and none of the
// other's, one idempotency key for a request and its retry, both
// signatures during the overlap (either secret verifies), the new one
// alone after it.
func TestSigningOnTheWire(t *testing.T) {
	t.Parallel()
	e := setup(t)
	for _, g := range b2b.Signings {
		t.Run(string(g), func(t *testing.T) {
			r := rotate(t, e, g)
			own, other := []string{b2b.HeaderWebhookID, b2b.HeaderWebhookTimestamp, b2b.HeaderWebhookSignature},
				[]string{b2b.HeaderIdempotencyKey, b2b.HeaderTimestamp, b2b.HeaderSignature}
			sep := " "
			if g == b2b.SigningFairway {
				own, other, sep = other, own, ","
			}
			for _, req := range []b2btest.Request{r.first, r.retry, r.during, r.after} {
				for _, h := range own {
					if req.Header.Get(h) == "" {
						t.Fatalf("no %s header: %v", h, req.Header)
					}
				}
				for _, h := range other {
					if req.Header.Get(h) != "" {
						t.Fatalf("%s signing sent %s: %v", g, h, req.Header)
					}
				}
			}
			if k := g.IdempotencyKey(r.first.Header); k != g.IdempotencyKey(r.retry.Header) || k == g.IdempotencyKey(r.during.Header) {
				t.Fatalf("idempotency keys %q, %q, %q: want the first two equal, the third another", k, g.IdempotencyKey(r.retry.Header), g.IdempotencyKey(r.during.Header))
			}
			if r.first.Header.Get(own[1]) == r.retry.Header.Get(own[1]) {
				t.Fatalf("a retry kept the timestamp %s", r.first.Header.Get(own[1]))
			}
			for _, tc := range []struct {
				name   string
				req    b2btest.Request
				secret b2b.Secret
				sigs   int
				ok     bool
			}{
				{"RetryOld", r.retry, r.old, 1, true},
				{"RetryNew", r.retry, r.new, 1, false},
				{"DuringOld", r.during, r.old, 2, true},
				{"DuringNew", r.during, r.new, 2, true},
				{"DuringOther", r.during, b2b.GenerateSecret(), 2, false},
				{"AfterOld", r.after, r.old, 1, false},
				{"AfterNew", r.after, r.new, 1, true},
			} {
				if n := len(strings.Split(tc.req.Header.Get(own[2]), sep)); n != tc.sigs {
					t.Errorf("%s: %d signatures in %q, want %d", tc.name, n, tc.req.Header.Get(own[2]), tc.sigs)
				}
				err := g.Verify(tc.secret, tc.req.Header, tc.req.Body, e.clock.Now(), b2b.VerifyToleranceDefault)
				if (err == nil) != tc.ok {
					t.Errorf("%s: Verify = %v, want ok %v", tc.name, err, tc.ok)
				}
			}
		})
	}
}
