package ingest_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/fairwayhq/fairway/internal/bootstrap"
	"github.com/fairwayhq/fairway/internal/ingest"
)

// serverTimeout stands in for bootstrap.HTTPServer's read and write
// timeouts, shortened so that the uploads below outlast them in seconds.
const serverTimeout = time.Second

// slowServer serves f's handler from a bootstrap.HTTPServer whose read and
// write timeouts are serverTimeout.
func slowServer(t *testing.T, f *fixture) string {
	t.Helper()
	h := f.srv.Handler()
	hs := httptest.NewUnstartedServer(h)
	hs.Config = bootstrap.HTTPServer(h, quietLogger())
	hs.Config.ReadTimeout, hs.Config.WriteTimeout = serverTimeout, serverTimeout
	hs.Start()
	t.Cleanup(hs.Close)
	return hs.URL
}

// upload POSTs a CSV body that write produces (it stops when its writes
// fail) and gives up after wait.
func upload(t *testing.T, url, token string, wait time.Duration, write func(w io.Writer) error) (*http.Response, []byte, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	body, w := io.Pipe()
	defer body.Close()
	go func() { w.CloseWithError(write(w)) }()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/tenants/acme/imports", body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "text/csv")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp, b, err
}

// trickle writes a CSV header, then one byte every 50ms until its writes fail.
func trickle(w io.Writer) error {
	if _, err := io.WriteString(w, "product_id,version\n"); err != nil {
		return err
	}
	for {
		time.Sleep(50 * time.Millisecond)
		if _, err := io.WriteString(w, "p"); err != nil {
			return err
		}
	}
}

// An upload that trickles below UploadMinRate once its UploadGrace is
// over, or that outlasts UploadTimeout, is cut with 408 and a reason, even
// after the server's own write timeout; nothing of it is kept.
func TestSlowUploadIsCut(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		cfg  ingest.Config
		want string
	}{
		{"below the minimum rate", ingest.Config{UploadMinRate: 1024, UploadGrace: 1500 * time.Millisecond},
			"after the first 1.5s an upload must average at least 1024 bytes/s"},
		{"past the upload timeout", ingest.Config{UploadMinRate: 1, UploadGrace: time.Second, UploadTimeout: 1500 * time.Millisecond},
			"the upload took longer than 1.5s, the limit for one upload"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.cfg.SpoolDir = t.TempDir()
			f := setup(t, c.cfg)
			const wait = 20 * time.Second
			start := time.Now()
			resp, b, err := upload(t, slowServer(t, f), f.tokens["acme"], wait, trickle)
			if err != nil {
				t.Fatalf("upload: %v after %s, want a 408 within %s", err, time.Since(start).Round(time.Millisecond), wait)
			}
			var e struct{ Error, Code string }
			if resp.StatusCode != http.StatusRequestTimeout || json.Unmarshal(b, &e) != nil || e.Code != "upload_too_slow" ||
				!strings.Contains(e.Error, c.want) {
				t.Fatalf("status %d %s, want 408 upload_too_slow saying %q", resp.StatusCode, b, c.want)
			}
			t.Logf("cut after %s: %s", time.Since(start).Round(time.Millisecond), e.Error)
			if left, err := os.ReadDir(c.cfg.SpoolDir); err != nil || len(left) != 0 {
				t.Fatalf("spool dir holds %v (%v), want nothing", left, err)
			}
		})
	}
}

// An upload that keeps above UploadMinRate goes on past its UploadGrace
// and the server's read and write timeouts, and gets its 202.
func TestSlowUploadAboveTheMinimumRateIsAccepted(t *testing.T) {
	t.Parallel()
	f := setup(t, ingest.Config{UploadMinRate: 512, UploadGrace: 300 * time.Millisecond})
	const rounds, perRound = 25, 25 // 25 rows of 8 bytes every 100ms: 2 KB/s for 2.5s
	resp, b, err := upload(t, slowServer(t, f), f.tokens["acme"], time.Minute, func(w io.Writer) error {
		if _, err := io.WriteString(w, "product_id,version\n"); err != nil {
			return err
		}
		for r := range rounds {
			time.Sleep(100 * time.Millisecond)
			var chunk strings.Builder
			for i := range perRound {
				fmt.Fprintf(&chunk, "p%04d,1\n", r*perRound+i)
			}
			if _, err := io.WriteString(w, chunk.String()); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("upload: %v", err)
	}
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("status %d %s, want 202", resp.StatusCode, b)
	}
	j := f.waitImport(t, importID(t, b), f.tokens["acme"])
	if j.Status != ingest.ImportSucceeded || j.RowsOK != rounds*perRound {
		t.Fatalf("job %+v, want %d rows stored", j, rounds*perRound)
	}
}
