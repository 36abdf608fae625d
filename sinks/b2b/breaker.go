package b2b

import (
	"sync"
	"time"
)

// BreakerState is the state of a partner endpoint's circuit breaker.
type BreakerState int

const (
	// BreakerClosed: calls go through.
	BreakerClosed BreakerState = iota
	// BreakerHalfOpen: the cool-down is over; one probe call goes through,
	// others wait for its outcome.
	BreakerHalfOpen
	// BreakerOpen: no calls until the cool-down ends.
	BreakerOpen
)

func (s BreakerState) String() string {
	switch s {
	case BreakerClosed:
		return "closed"
	case BreakerHalfOpen:
		return "half-open"
	case BreakerOpen:
		return "open"
	}
	return "unknown"
}

// outcome is what one call taught the breaker.
type outcome int

const (
	outcomeSuccess   outcome = iota // the partner answered: 2xx, or a permanent refusal (400, 401, 403, 404, 410, 413, 422)
	outcomeFailure                  // anything else: 5xx, 408, 429, other statuses, network, timeout
	outcomeAbandoned                // the caller gave up (context canceled): no verdict
)

// breaker guards one endpoint (scheme://host:port). It also holds the
// endpoint's Retry-After deadline.
type breaker struct {
	threshold int
	coolDown  time.Duration

	mu         sync.Mutex
	state      BreakerState
	failures   int       // consecutive failures while closed
	openUntil  time.Time // while open
	retryUntil time.Time // Retry-After in force until
	probing    bool      // a half-open probe is in flight
}

// allow reports whether a call may go now. When it may not, wait is how long
// until it may and cause is ErrCircuitOpen or ErrRetryAfter. probeWait is
// the wait reported while another call is the half-open probe.
func (b *breaker) allow(now time.Time, probeWait time.Duration) (wait time.Duration, cause error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if now.Before(b.retryUntil) {
		return b.retryUntil.Sub(now), ErrRetryAfter
	}
	switch b.state {
	case BreakerOpen:
		if now.Before(b.openUntil) {
			return b.openUntil.Sub(now), ErrCircuitOpen
		}
		b.state, b.probing = BreakerHalfOpen, true
		return 0, nil
	case BreakerHalfOpen:
		if b.probing {
			return probeWait, ErrCircuitOpen
		}
		b.probing = true
		return 0, nil
	}
	return 0, nil
}

// record takes the outcome of an allowed call made at now; retryAfter > 0
// is a Retry-After the partner sent.
func (b *breaker) record(now time.Time, o outcome, retryAfter time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if retryAfter > 0 {
		if until := now.Add(retryAfter); until.After(b.retryUntil) {
			b.retryUntil = until
		}
	}
	wasProbe := b.state == BreakerHalfOpen && b.probing
	switch o {
	case outcomeSuccess:
		b.state, b.failures, b.probing = BreakerClosed, 0, false
	case outcomeFailure:
		b.failures++
		if wasProbe || (b.state == BreakerClosed && b.failures >= b.threshold) {
			b.state, b.openUntil, b.probing = BreakerOpen, now.Add(b.coolDown), false
		}
	case outcomeAbandoned:
		if wasProbe {
			b.probing = false // let the next call probe
		}
	}
}

// BreakerStatus describes one endpoint's breaker for status pages.
type BreakerStatus struct {
	// Endpoint is scheme://host[:port] of the partner URL.
	Endpoint string
	State    BreakerState
	// ConsecutiveFailures counts failures since the last success.
	ConsecutiveFailures int
	// OpenUntil is when an open breaker lets a probe through.
	OpenUntil time.Time
	// RetryAfterUntil is when the partner's last Retry-After ends.
	RetryAfterUntil time.Time
}

func (b *breaker) status(endpoint string, now time.Time) BreakerStatus {
	b.mu.Lock()
	defer b.mu.Unlock()
	st := b.state
	if st == BreakerOpen && !now.Before(b.openUntil) {
		st = BreakerHalfOpen // the next call probes
	}
	return BreakerStatus{Endpoint: endpoint, State: st, ConsecutiveFailures: b.failures, OpenUntil: b.openUntil, RetryAfterUntil: b.retryUntil}
}
