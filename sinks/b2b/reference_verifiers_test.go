package b2b_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/fairwayhq/fairway/sinks/b2b"
	"github.com/fairwayhq/fairway/sinks/b2b/b2btest"
)

// TestStandardWebhooksReferenceVerifiers gives requests the sink sent to a
// real receiver, around a secret rotation, to verifiers fairway did not
// write: the Go library and the npm package of the Standard Webhooks
// project. Each must accept a request under a secret that signed it and
// refuse it under any other, or with a tampered body.
func TestStandardWebhooksReferenceVerifiers(t *testing.T) {
	t.Parallel()
	verifyJS := nodeVerifier(t)
	e := setup(t)
	r := rotate(t, e, b2b.SigningStandard)
	other := b2b.GenerateSecret()
	tampered := func(req b2btest.Request) b2btest.Request {
		req.Body = bytes.Replace(req.Body, []byte(`"p2"`), []byte(`"p9"`), 1)
		return req
	}
	cases := []struct {
		name   string
		req    b2btest.Request
		secret b2b.Secret
		ok     bool
	}{
		{"RefusedOld", r.first, r.old, true},
		{"RetryOld", r.retry, r.old, true},
		{"RetryNew", r.retry, r.new, false},
		{"DuringOld", r.during, r.old, true},
		{"DuringNew", r.during, r.new, true},
		{"DuringOther", r.during, other, false},
		{"DuringTamperedOld", tampered(r.during), r.old, false},
		{"DuringTamperedNew", tampered(r.during), r.new, false},
		{"AfterOld", r.after, r.old, false},
		{"AfterNew", r.after, r.new, true},
	}
	if bytes.Equal(tampered(r.during).Body, r.during.Body) {
		t.Fatalf("the tampered body is the body: %s", r.during.Body)
	}
	js := make([]jsRequest, len(cases))
	for i, tc := range cases {
		js[i] = newJSRequest(b2b.WebhookSecret(tc.secret), tc.req)
	}
	jsResults := verifyJS(js)
	for i, tc := range cases {
		wh, err := standardwebhooks.NewWebhook(b2b.WebhookSecret(tc.secret))
		if err != nil {
			t.Fatalf("%s: Go reference: NewWebhook: %v", tc.name, err)
		}
		if err := wh.Verify(tc.req.Body, tc.req.Header); (err == nil) != tc.ok {
			t.Errorf("%s: Go reference Verify = %v, want ok %v", tc.name, err, tc.ok)
		}
		if got := jsResults[i]; (got == "") != tc.ok {
			t.Errorf("%s: npm standardwebhooks verify = %q, want ok %v", tc.name, got, tc.ok)
		}
	}
}

// standardWebhooksDir holds package.json and package-lock.json pinning the
// npm package standardwebhooks, and verify.mjs, which runs it.
const standardWebhooksDir = "testdata/standardwebhooks"

// jsRequest is one input of verify.mjs.
type jsRequest struct {
	Secret  string            `json:"secret"`
	Headers map[string]string `json:"headers"`
	Body    []byte            `json:"body"` // base64 in JSON
}

// newJSRequest presents req as Node's http module would: lower-case
// header names, repeated values joined with ", ".
func newJSRequest(secret string, req b2btest.Request) jsRequest {
	h := make(map[string]string, len(req.Header))
	for k, vs := range req.Header {
		h[strings.ToLower(k)] = strings.Join(vs, ", ")
	}
	return jsRequest{Secret: secret, Headers: h, Body: req.Body}
}

var npmInstall = sync.OnceValues(func() (string, error) {
	dir, err := filepath.Abs(standardWebhooksDir)
	if err != nil {
		return "", err
	}
	var pkg struct {
		Dependencies map[string]string `json:"dependencies"`
	}
	var installed struct {
		Version string `json:"version"`
	}
	raw, err := os.ReadFile(filepath.Join(dir, "package.json"))
	if err != nil {
		return "", err
	}
	if err := json.Unmarshal(raw, &pkg); err != nil {
		return "", err
	}
	if raw, err := os.ReadFile(filepath.Join(dir, "node_modules", "standardwebhooks", "package.json")); err == nil &&
		json.Unmarshal(raw, &installed) == nil && installed.Version == pkg.Dependencies["standardwebhooks"] {
		return dir, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "npm", "ci", "--no-audit", "--no-fund")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", &npmError{pin: pkg.Dependencies["standardwebhooks"], dir: dir, err: err, out: out}
	}
	return dir, nil
})

type npmError struct {
	pin, dir string
	err      error
	out      []byte
}

func (e *npmError) Error() string {
	return "npm could not install standardwebhooks@" + e.pin + " (the Standard Webhooks reference verifier) from the npm registry: " +
		e.err.Error() + "\n" + string(e.out) +
		"\nThe test needs node and npm (Debian: apt-get install nodejs npm) and the npm registry; `npm ci` in " + e.dir + " is what it runs."
}

// nodeVerifier installs the pinned npm package standardwebhooks (once per
// test process; node_modules is kept, git-ignored, and reused while it
// holds the pinned version) and returns a function that runs its
// Webhook.verify on requests, giving "" for each accepted one and the
// error otherwise. The test fails, saying what is missing, when node or
// npm is absent or the install fails.
func nodeVerifier(t *testing.T) func([]jsRequest) []string {
	t.Helper()
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is not on PATH: the Standard Webhooks reference verifier test runs the npm package standardwebhooks on node (Debian: apt-get install nodejs npm)", tool)
		}
	}
	dir, err := npmInstall()
	if err != nil {
		t.Fatal(err)
	}
	return func(reqs []jsRequest) []string {
		t.Helper()
		in, err := json.Marshal(reqs)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "node", "verify.mjs")
		cmd.Dir = dir
		cmd.Stdin = bytes.NewReader(in)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("node verify.mjs: %v\n%s", err, stderr.Bytes())
		}
		var results []string
		if err := json.Unmarshal(out, &results); err != nil || len(results) != len(reqs) {
			t.Fatalf("node verify.mjs printed %q (%v), want %d results", out, err, len(reqs))
		}
		return results
	}
}
