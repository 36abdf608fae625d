// Package b2btest is a real HTTP receiver for B2B sink tests and the demo:
// an idempotent partner that verifies signatures, stores the newest version
// of each product, rejects poison events with 422, and can be told to fail
// (a status, Retry-After, a delay, a reset connection, garbage) for the
// next N requests or until told otherwise.
package b2btest

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"time"

	"github.com/fairwayhq/fairway/sinks/b2b"
)

// MaxBodyBytes bounds the request body the receiver reads.
const MaxBodyBytes = 64 << 20

// Failure is how the receiver answers a request it is told to fail.
type Failure struct {
	// Status is the HTTP status to answer (default 503).
	Status int
	// RetryAfter, when set, is sent as the Retry-After header.
	RetryAfter string
	// Body is the response body (default a short JSON error).
	Body []byte
	// Delay holds the answer this long, or until the client gives up.
	Delay time.Duration
	// Hold holds the answer until the channel is closed or the client
	// gives up. Held() signals when a request is being held.
	Hold <-chan struct{}
	// Reset closes the connection with a TCP RST instead of answering.
	Reset bool
	// Garbage writes these bytes on the raw connection instead of an HTTP
	// answer, then closes it.
	Garbage []byte
	// EndlessBody streams the body without end (until the client stops
	// reading), after Body.
	EndlessBody bool
}

// Stored is what the receiver holds for one product.
type Stored struct {
	Version int64
	Op      string
	Payload json.RawMessage
	Seq     uint64
}

// Request is one request as the receiver saw it.
type Request struct {
	Header http.Header
	Body   []byte
	// Status is the status answered (0 for Reset and Garbage).
	Status int
	// SignatureErr is the result of Options.Signing.Verify.
	SignatureErr error
}

// Options configure a Receiver.
type Options struct {
	// Signing is the scheme the receiver verifies and takes the
	// idempotency key from. Default b2b.SigningDefault, the scheme of a
	// partner registered without one.
	Signing b2b.Signing
	// Secret verifies the signatures (for b2b.SigningStandard, the key:
	// the bytes after "whsec_", base64-decoded). Requests that fail
	// verification are answered 401.
	Secret []byte
	// Clock is the receiver's clock for signature timestamps. Default
	// time.Now.
	Clock func() time.Time
	// Tolerance for the signature timestamp. Default
	// b2b.VerifyToleranceDefault.
	Tolerance time.Duration
	// Reject returns true for events answered with 422 (poison). Default:
	// events whose payload has a top-level "poison" key.
	Reject func(b2b.BodyEvent) bool
	// KeepRequests keeps every request (headers and body) for Requests().
	KeepRequests bool
}

// Receiver is a partner endpoint on loopback.
type Receiver struct {
	srv  *httptest.Server
	opts Options
	held chan struct{}

	mu        sync.Mutex
	failN     int
	failUntil bool
	failure   Failure
	products  map[[2]string]Stored
	requests  []Request
	count     int // all requests
	ok        int // 2xx answers
	badSig    int
	accepted  int // events stored or already newer
	keys      map[string]int
}

// TB is the part of testing.TB New needs (so this package does not link
// the testing package into programs such as the demo).
type TB interface {
	Helper()
	Cleanup(func())
}

// New starts a receiver; it is closed when the test ends.
func New(t TB, opts Options) *Receiver {
	t.Helper()
	r := Start(opts)
	t.Cleanup(r.Close)
	return r
}

// Start starts a receiver on a loopback port; Close stops it.
func Start(opts Options) *Receiver {
	opts.Signing = cmp.Or(opts.Signing, b2b.SigningDefault)
	if opts.Clock == nil {
		opts.Clock = time.Now
	}
	if opts.Tolerance == 0 {
		opts.Tolerance = b2b.VerifyToleranceDefault
	}
	if opts.Reject == nil {
		opts.Reject = func(e b2b.BodyEvent) bool {
			// Decode only a payload that may hold the key: decoding every
			// payload into a map was most of the receiver's CPU.
			if !bytes.Contains(e.Payload, []byte("oison")) && !bytes.Contains(e.Payload, []byte(`\u`)) {
				return false
			}
			var m map[string]json.RawMessage
			return json.Unmarshal(e.Payload, &m) == nil && m["poison"] != nil
		}
	}
	r := &Receiver{opts: opts, products: map[[2]string]Stored{}, keys: map[string]int{}, held: make(chan struct{}, 1024)}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	return r
}

// Close stops the receiver.
func (r *Receiver) Close() { r.srv.Close() }

// URL is the endpoint to register as the partner URL.
func (r *Receiver) URL() string { return r.srv.URL + "/hook" }

// FailNext makes the next n requests fail with f.
func (r *Receiver) FailNext(n int, f Failure) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failN, r.failUntil, r.failure = n, false, f
}

// FailAlways makes every request fail with f until Heal.
func (r *Receiver) FailAlways(f Failure) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failN, r.failUntil, r.failure = 0, true, f
}

// Heal stops failing.
func (r *Receiver) Heal() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failN, r.failUntil = 0, false
}

// Held receives a value each time a request starts being held by a
// Failure with Hold or Delay.
func (r *Receiver) Held() <-chan struct{} { return r.held }

// Count is how many requests arrived (failed ones included).
func (r *Receiver) Count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.count
}

// OK is how many requests were answered 2xx.
func (r *Receiver) OK() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ok
}

// BadSignatures is how many requests failed signature verification.
func (r *Receiver) BadSignatures() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.badSig
}

// Accepted is how many events arrived in 2xx-answered requests.
func (r *Receiver) Accepted() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.accepted
}

// Requests returns the requests kept (Options.KeepRequests).
func (r *Receiver) Requests() []Request {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Request(nil), r.requests...)
}

// Get returns what the receiver holds for a product.
func (r *Receiver) Get(tenant, productID string) (Stored, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s, ok := r.products[[2]string{tenant, productID}]
	return s, ok
}

// Products counts the products held for tenant.
func (r *Receiver) Products(tenant string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for k := range r.products {
		if k[0] == tenant {
			n++
		}
	}
	return n
}

// takeFailure returns the failure to apply to this request, if any.
func (r *Receiver) takeFailure() (Failure, bool) {
	switch {
	case r.failUntil:
		return r.failure, true
	case r.failN > 0:
		r.failN--
		return r.failure, true
	}
	return Failure{}, false
}

func (r *Receiver) serve(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(io.LimitReader(req.Body, MaxBodyBytes))
	rec := Request{Header: req.Header.Clone()}
	r.mu.Lock()
	r.count++
	f, fail := r.takeFailure()
	r.mu.Unlock()
	if err != nil {
		r.answer(w, rec, http.StatusBadRequest, `{"error":"cannot read body"}`)
		return
	}
	if r.opts.KeepRequests {
		rec.Body = body
	}
	rec.SignatureErr = r.opts.Signing.Verify(r.opts.Secret, req.Header, body, r.opts.Clock(), r.opts.Tolerance)
	if fail {
		r.fail(w, req, rec, f)
		return
	}
	if rec.SignatureErr != nil {
		r.mu.Lock()
		r.badSig++
		r.mu.Unlock()
		r.answer(w, rec, http.StatusUnauthorized, fmt.Sprintf(`{"error":%q}`, rec.SignatureErr.Error()))
		return
	}
	key := r.opts.Signing.IdempotencyKey(req.Header)
	if key == "" {
		r.answer(w, rec, http.StatusBadRequest, `{"error":"no idempotency key"}`)
		return
	}
	var b b2b.Body
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&b); err != nil {
		r.answer(w, rec, http.StatusBadRequest, fmt.Sprintf(`{"error":%q}`, "body: "+err.Error()))
		return
	}
	for _, e := range b.Events {
		if r.opts.Reject(e) {
			r.answer(w, rec, http.StatusUnprocessableEntity, fmt.Sprintf(`{"error":"poison","product_id":%q}`, e.ProductID))
			return
		}
	}
	r.mu.Lock()
	for _, e := range b.Events {
		k := [2]string{b.Tenant, e.ProductID}
		if cur, ok := r.products[k]; !ok || cur.Version < e.Version {
			r.products[k] = Stored{Version: e.Version, Op: string(e.Op), Payload: e.Payload, Seq: e.Seq}
		}
	}
	r.accepted += len(b.Events)
	r.keys[key]++
	r.mu.Unlock()
	r.answer(w, rec, http.StatusOK, fmt.Sprintf(`{"accepted":%d}`, len(b.Events)))
}

func (r *Receiver) fail(w http.ResponseWriter, req *http.Request, rec Request, f Failure) {
	if f.Delay > 0 || f.Hold != nil {
		r.held <- struct{}{}
		var timer <-chan time.Time
		if f.Delay > 0 {
			t := time.NewTimer(f.Delay)
			defer t.Stop()
			timer = t.C
		}
		select {
		case <-timer:
		case <-f.Hold:
		case <-req.Context().Done():
			r.keep(rec)
			return
		}
	}
	if f.Reset || f.Garbage != nil {
		r.keep(rec)
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			panic(err)
		}
		if f.Garbage != nil {
			_, _ = conn.Write(f.Garbage)
		} else if tc, ok := conn.(*net.TCPConn); ok {
			_ = tc.SetLinger(0)
		}
		_ = conn.Close()
		return
	}
	if f.RetryAfter != "" {
		w.Header().Set("Retry-After", f.RetryAfter)
	}
	status := f.Status
	if status == 0 {
		status = http.StatusServiceUnavailable
	}
	body := f.Body
	if body == nil {
		body = fmt.Appendf(nil, `{"error":"told to fail with %d"}`, status)
	}
	rec.Status = status
	r.keep(rec)
	w.WriteHeader(status)
	_, _ = w.Write(body)
	if f.EndlessBody {
		chunk := bytes.Repeat([]byte("garbage\x00\xff"), 4096)
		for req.Context().Err() == nil {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	}
}

func (r *Receiver) answer(w http.ResponseWriter, rec Request, status int, body string) {
	rec.Status = status
	r.mu.Lock()
	if status/100 == 2 {
		r.ok++
	}
	r.mu.Unlock()
	r.keep(rec)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, body)
}

func (r *Receiver) keep(rec Request) {
	if !r.opts.KeepRequests {
		return
	}
	r.mu.Lock()
	r.requests = append(r.requests, rec)
	r.mu.Unlock()
}

// IdempotencyKeys returns how many accepted requests carried each key.
func (r *Receiver) IdempotencyKeys() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]int, len(r.keys))
	for k, v := range r.keys {
		out[k] = v
	}
	return out
}
