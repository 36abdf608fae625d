package ingest

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"
)

// uploadAnswerTime is how long a CSV upload's answer may take to write
// once its body is in: the server's WriteTimeout counts from the request's
// start, and an upload may take longer than that.
const uploadAnswerTime = time.Minute

// uploadDeadline reads a CSV upload's body and keeps the connection's read
// deadline at start + UploadGrace + received/UploadMinRate seconds, capped
// at start + UploadTimeout. An upload that keeps up the minimum rate on
// average always has time for its next bytes, and a pause is covered by
// the time it has banked; a trickle falls behind, its read fails and the
// error Is ErrUploadTooSlow.
type uploadDeadline struct {
	body  io.Reader
	rc    *http.ResponseController
	cfg   *Config
	start time.Time
	n     int64 // bytes received
}

func newUploadDeadline(w http.ResponseWriter, body io.Reader, cfg *Config) *uploadDeadline {
	u := &uploadDeadline{body: body, rc: http.NewResponseController(w), cfg: cfg, start: cfg.Clock()}
	u.extend()
	return u
}

func (u *uploadDeadline) Read(p []byte) (int, error) {
	n, err := u.body.Read(p)
	if n > 0 {
		u.n += int64(n)
		u.extend()
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		err = u.tooSlow()
	}
	return n, err
}

// deadline returns the time by which the next bytes must arrive and
// whether UploadTimeout, not the rate, sets it.
func (u *uploadDeadline) deadline() (time.Time, bool) {
	earned := float64(u.cfg.UploadGrace) + float64(u.n)/float64(u.cfg.UploadMinRate)*float64(time.Second)
	if earned >= float64(u.cfg.UploadTimeout) {
		return u.start.Add(u.cfg.UploadTimeout), true
	}
	return u.start.Add(time.Duration(earned)), false
}

func (u *uploadDeadline) extend() {
	d, _ := u.deadline()
	// A writer without deadlines (not a net/http connection) leaves the
	// upload to the server's own timeouts.
	_ = u.rc.SetReadDeadline(d)
}

func (u *uploadDeadline) tooSlow() error {
	took := u.cfg.Clock().Sub(u.start).Round(100 * time.Millisecond)
	if _, capped := u.deadline(); capped {
		return fmt.Errorf("%w: the upload took longer than %s, the limit for one upload (%d bytes arrived)",
			ErrUploadTooSlow, u.cfg.UploadTimeout, u.n)
	}
	return fmt.Errorf("%w: %d bytes arrived in %s; after the first %s an upload must average at least %d bytes/s",
		ErrUploadTooSlow, u.n, took, u.cfg.UploadGrace, u.cfg.UploadMinRate)
}
