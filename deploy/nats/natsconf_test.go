// Package natsconf_test starts embedded nats-server instances from the
// committed configs in this directory (single.conf, cluster/n*.conf, both
// including accounts.conf) and checks, user by user, what each may and may
// not do. Only ports and store directories are overridden.
package natsconf_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/crypto/bcrypt"

	"github.com/fairwayhq/fairway/pkg/events"
)

// passwordEnv maps each user of accounts.conf to the environment variable
// holding its password.
var passwordEnv = map[string]string{
	"sys":            "FAIRWAY_SYS_PASSWORD",
	"ingest":         "FAIRWAY_INGEST_PASSWORD",
	"dispatcher":     "FAIRWAY_DISPATCHER_PASSWORD",
	"sinks":          "FAIRWAY_SINKS_PASSWORD",
	"operator":       "FAIRWAY_OPERATOR_PASSWORD",
	"publisher-acme": "FAIRWAY_PUBLISHER_ACME_PASSWORD",
}

// passwords are the plaintext passwords clients use, by user.
var passwords = map[string]string{}

// The layout of the streams events.EnsureStream creates here, and the
// subject an event published on a subject is stored on.
var (
	defaultLayout = events.LayoutDefault
	stored        = defaultLayout.StoredSubject
)

// bcryptUser's variable holds a quoted bcrypt hash instead of the password,
// as README.md suggests for production.
const bcryptUser = "operator"

// TestMain gives every user a fresh random password before any config is
// parsed: nats-server reads $FAIRWAY_*_PASSWORD from the environment.
func TestMain(m *testing.M) {
	for user, env := range passwordEnv {
		// Letters and digits, starting with a letter (see accounts.conf).
		pw := "p" + randHex(16)
		passwords[user] = pw
		val := pw
		if user == bcryptUser {
			h, err := bcrypt.GenerateFromPassword([]byte(pw), bcrypt.MinCost)
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(2)
			}
			val = `"` + string(h) + `"`
		}
		if err := os.Setenv(env, val); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
	}
	os.Exit(m.Run())
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func password(t testing.TB, user string) string {
	t.Helper()
	pw, ok := passwords[user]
	if !ok {
		t.Fatalf("unknown user %q", user)
	}
	return pw
}

// Streams other than PRODUCTS, as the services will create them.
var (
	workStream = jetstream.StreamConfig{Name: "WORK", Subjects: []string{"work.>"}, Storage: jetstream.FileStorage}
	dlqStream  = jetstream.StreamConfig{Name: "DLQ", Subjects: []string{"dlq.>"}, Storage: jetstream.FileStorage}
)

// loadConfig parses a committed config file.
func loadConfig(t testing.TB, path string) *server.Options {
	t.Helper()
	opts, err := server.ProcessConfigFile(path)
	if err != nil {
		t.Fatalf("parse %s: %v", path, err)
	}
	return opts
}

// startServer points opts at a free client and monitoring port and a fresh
// store, starts the server and shuts it down at cleanup.
func startServer(t testing.TB, opts *server.Options) *server.Server {
	t.Helper()
	opts.Port = -1
	opts.HTTPPort = -1
	opts.StoreDir = t.TempDir()
	opts.NoLog = true
	opts.NoSigs = true
	srv, err := server.NewServer(opts)
	if err != nil {
		t.Fatalf("new server %s: %v", opts.ServerName, err)
	}
	srv.Start()
	t.Cleanup(func() {
		srv.Shutdown()
		srv.WaitForShutdown()
	})
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatalf("server %s not ready in 10s", opts.ServerName)
	}
	return srv
}

// client is one connection as one user. Asynchronous errors (permission
// violations among them) are collected for expectDenied.
type client struct {
	t    testing.TB
	user string
	nc   *nats.Conn
	js   jetstream.JetStream

	mu       sync.Mutex
	errs     []error
	signal   chan struct{} // gets a value when errs grows
	expected map[string]bool
}

// connect connects as user with its password, adding opts (TLS, say).
func connect(t testing.TB, url, user string, opts ...nats.Option) *client {
	t.Helper()
	c := &client{t: t, user: user, signal: make(chan struct{}, 1), expected: map[string]bool{}}
	opts = append([]nats.Option{
		nats.UserInfo(user, password(t, user)),
		nats.Name("natsconf-test-" + user),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			c.mu.Lock()
			c.errs = append(c.errs, err)
			c.mu.Unlock()
			select {
			case c.signal <- struct{}{}:
			default:
			}
		}),
	}, opts...)
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		t.Fatalf("connect as %s: %v", user, err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("jetstream as %s: %v", user, err)
	}
	c.nc, c.js = nc, js
	t.Cleanup(func() {
		// Every permission violation must have been expected.
		_ = nc.Flush()
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, err := range c.errs {
			if s, ok := violationSubject(err); !ok || !c.expected[s] {
				t.Errorf("%s: unexpected asynchronous error: %v", user, err)
			}
		}
		nc.Close()
	})
	return c
}

// violationSubject returns the subject of a permissions violation error.
func violationSubject(err error) (string, bool) {
	if !errors.Is(err, nats.ErrPermissionViolation) {
		return "", false
	}
	msg := err.Error()
	i := strings.IndexByte(msg, '"')
	j := strings.LastIndexByte(msg, '"')
	if i < 0 || j <= i {
		return "", false
	}
	return msg[i+1 : j], true
}

// expectViolation waits for the server to report a permissions violation
// of kind ("Publish" or "Subscription") on subject.
func (c *client) expectViolation(kind, subject string) {
	c.t.Helper()
	c.mu.Lock()
	c.expected[subject] = true
	c.mu.Unlock()
	want := fmt.Sprintf("Permissions Violation for %s to %q", kind, subject)
	deadline := time.After(5 * time.Second)
	for {
		c.mu.Lock()
		for i, err := range c.errs {
			if errors.Is(err, nats.ErrPermissionViolation) && strings.Contains(err.Error(), want) {
				c.errs = append(c.errs[:i], c.errs[i+1:]...)
				c.mu.Unlock()
				return
			}
		}
		c.mu.Unlock()
		select {
		case <-c.signal:
		case <-deadline:
			c.t.Errorf("%s: no %q within 5s; the server allowed it", c.user, want)
			return
		}
	}
}

// denyPublish publishes to subject and expects the server to refuse it.
func (c *client) denyPublish(subject string) {
	c.t.Helper()
	if err := c.nc.Publish(subject, []byte(`{}`)); err != nil {
		c.t.Fatalf("%s: publish %s: %v", c.user, subject, err)
	}
	if err := c.nc.Flush(); err != nil {
		c.t.Fatalf("%s: flush: %v", c.user, err)
	}
	c.expectViolation("Publish", subject)
}

// denyJSPublish publishes to subject through JetStream and expects no ack
// and a permissions violation.
func (c *client) denyJSPublish(subject string) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	if ack, err := c.js.Publish(ctx, subject, []byte(`{}`), jetstream.WithRetryAttempts(0)); err == nil {
		c.t.Errorf("%s: JetStream publish to %s was acknowledged: %+v", c.user, subject, ack)
	}
	c.expectViolation("Publish", subject)
}

// denyAPI calls a JetStream API through the client library, expects it to
// fail, and expects the violation on the API subject.
func (c *client) denyAPI(subject string, call func(ctx context.Context) error) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	if err := call(ctx); err == nil {
		c.t.Errorf("%s: %s succeeded", c.user, subject)
	}
	c.expectViolation("Publish", subject)
}

// denySubscribe subscribes to subject and expects the server to refuse it.
func (c *client) denySubscribe(subject string) {
	c.t.Helper()
	sub, err := c.nc.SubscribeSync(subject)
	if err != nil {
		c.t.Fatalf("%s: subscribe %s: %v", c.user, subject, err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := c.nc.Flush(); err != nil {
		c.t.Fatalf("%s: flush: %v", c.user, err)
	}
	c.expectViolation("Subscription", subject)
}

func (c *client) stream(ctx context.Context, name string) jetstream.Stream {
	c.t.Helper()
	s, err := c.js.Stream(ctx, name)
	if err != nil {
		c.t.Fatalf("%s: stream %s: %v", c.user, name, err)
	}
	return s
}

func (c *client) jsPublish(ctx context.Context, subject string, data []byte) *jetstream.PubAck {
	c.t.Helper()
	ack, err := c.js.Publish(ctx, subject, data)
	if err != nil {
		c.t.Fatalf("%s: JetStream publish to %s: %v", c.user, subject, err)
	}
	return ack
}

// directBatch reads up to batch messages of PRODUCTS matching filter from
// sequence 1 with one batched direct get, the way the dispatcher reads a
// tenant's events.
func (c *client) directBatch(ctx context.Context, filter string, batch int) []*nats.Msg {
	c.t.Helper()
	inbox := c.nc.NewInbox()
	sub, err := c.nc.SubscribeSync(inbox)
	if err != nil {
		c.t.Fatalf("%s: subscribe: %v", c.user, err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	req, _ := json.Marshal(map[string]any{"seq": 1, "next_by_subj": filter, "batch": batch})
	if err := c.nc.PublishRequest("$JS.API.DIRECT.GET."+events.StreamName, inbox, req); err != nil {
		c.t.Fatalf("%s: direct get: %v", c.user, err)
	}
	var msgs []*nats.Msg
	for {
		m, err := sub.NextMsgWithContext(ctx)
		if err != nil {
			c.t.Fatalf("%s: batched direct get on %s: %v (after %d messages)", c.user, filter, err, len(msgs))
		}
		switch m.Header.Get("Status") {
		case "":
			msgs = append(msgs, m)
		case "204": // end of batch
			return msgs
		case "404":
			return msgs
		default:
			c.t.Fatalf("%s: direct get: status %s %s", c.user, m.Header.Get("Status"), m.Header.Get("Description"))
		}
	}
}

func testEvent(tenant, product string, version int64) events.Event {
	return events.Event{
		Tenant: tenant, ProductID: product, Version: version, Op: events.OpUpsert,
		OccurredAt: time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC),
		Payload:    json.RawMessage(`{"name":"Widget"}`),
	}
}

// publishEvent publishes ev with the pkg/events publisher (async publish,
// Nats-Msg-Id) and returns its stream sequence.
func (c *client) publishEvent(ctx context.Context, ev events.Event) uint64 {
	c.t.Helper()
	pub, err := events.NewPublisher(c.js, events.WithAckTimeout(5*time.Second))
	if err != nil {
		c.t.Fatalf("%s: publisher: %v", c.user, err)
	}
	res := pub.PublishOne(ctx, ev)
	if res.Err != nil || res.Seq == 0 {
		c.t.Fatalf("%s: publish event %s: %+v", c.user, ev.Key(), res)
	}
	return res.Seq
}

func TestSingleNode(t *testing.T) {
	t.Parallel()
	opts := loadConfig(t, "single.conf")
	// What the committed file says, before the test overrides ports/store.
	if opts.ServerName != "fairway-single" || opts.Host != "127.0.0.1" || opts.Port != 4222 || !opts.JetStream ||
		opts.StoreDir != "./.dev/nats/single" || opts.JetStreamMaxStore != 10<<30 || opts.SyncAlways || opts.SystemAccount != "SYS" {
		t.Fatalf("single.conf: unexpected options: name=%q host=%q port=%d js=%v store=%q max_file=%d sync_always=%v system_account=%q",
			opts.ServerName, opts.Host, opts.Port, opts.JetStream, opts.StoreDir, opts.JetStreamMaxStore, opts.SyncAlways, opts.SystemAccount)
	}
	srv := startServer(t, opts)
	url := srv.ClientURL()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// The subtests run in order: each service finds the state the previous
	// one left (streams, events, work items), so the first failure stops.
	run := func(name string, f func(t *testing.T)) {
		t.Helper()
		if !t.Run(name, f) {
			t.FailNow()
		}
	}

	run("authentication", func(t *testing.T) {
		if nc, err := nats.Connect(url); err == nil {
			nc.Close()
			t.Error("anonymous connection accepted")
		}
		if nc, err := nats.Connect(url, nats.UserInfo("ingest", "wrong")); err == nil {
			nc.Close()
			t.Error("wrong password accepted")
		}
		if nc, err := nats.Connect(url, nats.UserInfo("publisher-globex", "x")); err == nil {
			nc.Close()
			t.Error("unknown user accepted")
		}
	})

	run("ingest", func(t *testing.T) {
		c := connect(t, url, "ingest")
		// Twice: the first creates the stream, the second updates it.
		for range 2 {
			if _, err := events.EnsureStream(ctx, c.js, events.StreamConfig{}); err != nil {
				t.Fatalf("ingest: ensure PRODUCTS: %v", err)
			}
		}
		c.stream(ctx, events.StreamName) // readiness check: stream info
		c.publishEvent(ctx, testEvent("initech", "sku-1", 1))

		c.denyPublish("work.postgres.acme")
		c.denyPublish("dlq.postgres.acme")
		c.denyAPI("$JS.API.STREAM.CREATE.WORK", func(ctx context.Context) error {
			_, err := c.js.CreateStream(ctx, workStream)
			return err
		})
		c.denyPublish("$JS.API.STREAM.INFO.WORK")
		c.denyPublish("$JS.API.DIRECT.GET.DLQ")
		c.denyPublish("$JS.API.CONSUMER.CREATE.PRODUCTS.x")
		c.denyAPI("$JS.API.STREAM.DELETE.PRODUCTS", func(ctx context.Context) error {
			return c.js.DeleteStream(ctx, events.StreamName)
		})
		c.denyPublish("$JS.API.STREAM.PURGE.PRODUCTS")
		c.denySubscribe("products.>")
	})

	run("dispatcher creates WORK", func(t *testing.T) {
		c := connect(t, url, "dispatcher")
		for range 2 {
			if _, err := c.js.CreateOrUpdateStream(ctx, workStream); err != nil {
				t.Fatalf("dispatcher: ensure WORK: %v", err)
			}
		}
	})

	run("publisher-acme", func(t *testing.T) {
		c := connect(t, url, "publisher-acme")
		c.publishEvent(ctx, testEvent("acme", "sku-1", 1))
		ack := c.jsPublish(ctx, "products.acme.upsert", []byte(`{"tenant":"acme"}`))
		if ack.Stream != events.StreamName {
			t.Errorf("publisher-acme: ack from stream %q, want %s", ack.Stream, events.StreamName)
		}
		// A reply subject of its choosing must not let the stream's ack land
		// in WORK (checked by the operator below).
		if err := c.nc.PublishRequest("products.acme.upsert", "work.postgres.acme", []byte(`{"inject":true}`)); err != nil {
			t.Fatal(err)
		}

		c.denyJSPublish("products.globex.upsert")
		c.denyPublish("products.globex.delete")
		c.denyPublish("products.acmecorp.upsert")
		c.denyPublish("work.x")
		c.denyPublish("dlq.x")
		c.denyAPI("$JS.API.STREAM.CREATE.EVIL", func(ctx context.Context) error {
			_, err := c.js.CreateStream(ctx, jetstream.StreamConfig{Name: "EVIL", Subjects: []string{"evil.>"}})
			return err
		})
		c.denyAPI("$JS.API.INFO", func(ctx context.Context) error {
			_, err := c.js.AccountInfo(ctx)
			return err
		})
		c.denyPublish("$JS.API.STREAM.INFO.PRODUCTS")
		c.denyPublish("$JS.API.DIRECT.GET.PRODUCTS")
		c.denySubscribe("products.>")
		c.denySubscribe(">")
	})

	run("dispatcher", func(t *testing.T) {
		c := connect(t, url, "dispatcher")
		// A tenant's publisher may subscribe to _INBOX.> but must not see
		// the replies to the services (events of every tenant).
		spy := connect(t, url, "publisher-acme")
		spied, err := spy.nc.SubscribeSync("_INBOX.>")
		if err != nil {
			t.Fatal(err)
		}
		if err := spy.nc.Flush(); err != nil {
			t.Fatal(err)
		}
		acmeNormal, _ := defaultLayout.PrioritySubjects("acme", "")
		msgs := c.directBatch(ctx, acmeNormal, 100)
		// The replies were queued to every matching subscriber before the
		// dispatcher got them; a round trip flushes them to the spy.
		if err := spy.nc.Flush(); err != nil {
			t.Fatal(err)
		}
		if n, _, _ := spied.Pending(); n != 0 {
			t.Errorf("publisher-acme saw %d replies meant for the dispatcher", n)
		}
		var injected bool
		for _, m := range msgs {
			if m.Header.Get("Nats-Subject") != stored("products.acme.upsert") {
				t.Errorf("dispatcher: direct get for %s returned %s", acmeNormal, m.Header.Get("Nats-Subject"))
			}
			injected = injected || strings.Contains(string(m.Data), "inject")
		}
		if len(msgs) != 3 || !injected {
			t.Fatalf("dispatcher: direct get found %d acme events (injected one: %v), want 3", len(msgs), injected)
		}
		last, err := c.stream(ctx, events.StreamName).GetLastMsgForSubject(ctx, stored("products.acme.upsert"))
		if err != nil || !strings.Contains(string(last.Data), "inject") {
			t.Fatalf("dispatcher: direct get last: %v %+v", err, last)
		}

		// The doorbell: an ordered consumer on PRODUCTS.
		bell, err := c.js.OrderedConsumer(ctx, events.StreamName, jetstream.OrderedConsumerConfig{FilterSubjects: []string{events.SubjectWildcard}})
		if err != nil {
			t.Fatalf("dispatcher: ordered consumer: %v", err)
		}
		if _, err := bell.Next(jetstream.FetchMaxWait(5 * time.Second)); err != nil {
			t.Fatalf("dispatcher: ordered consumer next: %v", err)
		}

		c.jsPublish(ctx, "work.postgres.acme", []byte(`{"tenant":"acme","from":1,"to":3}`))

		c.denyPublish("products.acme.upsert")
		c.denyPublish("dlq.postgres.acme")
		c.denyPublish("$JS.API.STREAM.DELETE.PRODUCTS")
		c.denyPublish("$JS.API.STREAM.CREATE.DLQ")
		c.denyPublish("$JS.API.CONSUMER.MSG.NEXT.WORK.sink-postgres")
		c.denySubscribe("products.>")
	})

	run("sinks", func(t *testing.T) {
		c := connect(t, url, "sinks")
		for range 2 {
			if _, err := c.js.CreateOrUpdateStream(ctx, dlqStream); err != nil {
				t.Fatalf("sinks: ensure DLQ: %v", err)
			}
		}
		cons, err := c.stream(ctx, "WORK").CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
			Durable: "sink-postgres", FilterSubject: "work.postgres.>", AckPolicy: jetstream.AckExplicitPolicy,
		})
		if err != nil {
			t.Fatalf("sinks: durable consumer: %v", err)
		}
		if _, err := c.js.Consumer(ctx, "WORK", "sink-postgres"); err != nil {
			t.Fatalf("sinks: consumer info: %v", err)
		}
		batch, err := cons.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			t.Fatalf("sinks: fetch: %v", err)
		}
		var n int
		for m := range batch.Messages() {
			n++
			actx, acancel := context.WithTimeout(ctx, 5*time.Second)
			err := m.DoubleAck(actx)
			acancel()
			if err != nil {
				t.Fatalf("sinks: ack: %v", err)
			}
		}
		if n != 1 || batch.Error() != nil {
			t.Fatalf("sinks: fetched %d work items (%v), want 1", n, batch.Error())
		}
		if _, err := c.stream(ctx, events.StreamName).GetLastMsgForSubject(ctx, stored("products.acme.upsert")); err != nil {
			t.Fatalf("sinks: direct get: %v", err)
		}
		c.jsPublish(ctx, "dlq.postgres.acme", []byte(`{"reason":"test"}`))

		c.denyPublish("products.acme.upsert")
		c.denyPublish("work.postgres.acme")
		c.denyPublish("$JS.API.STREAM.DELETE.WORK")
		c.denyPublish("$JS.API.CONSUMER.DELETE.WORK.sink-postgres")
		c.denyPublish("$JS.API.STREAM.UPDATE.PRODUCTS")
		c.denyPublish("$JS.API.CONSUMER.CREATE.PRODUCTS.x")
	})

	run("operator", func(t *testing.T) {
		c := connect(t, url, "operator")
		var names []string
		lister := c.js.StreamNames(ctx)
		for n := range lister.Name() {
			names = append(names, n)
		}
		if lister.Err() != nil || strings.Join(names, ",") != "DLQ,PRODUCTS,WORK" {
			t.Fatalf("operator: stream names %v (%v), want DLQ, PRODUCTS, WORK", names, lister.Err())
		}

		// The sink's ack reached the server.
		ci, err := c.stream(ctx, "WORK").Consumer(ctx, "sink-postgres")
		if err != nil {
			t.Fatalf("operator: consumer: %v", err)
		}
		if info := ci.CachedInfo(); info.NumAckPending != 0 || info.AckFloor.Stream != 1 {
			t.Errorf("operator: sink-postgres ack pending %d, ack floor %d; want 0, 1", info.NumAckPending, info.AckFloor.Stream)
		}
		// WORK holds only the dispatcher's work item: the publisher's reply
		// subject did not turn its ack into a work item.
		work := c.stream(ctx, "WORK")
		if msgs := work.CachedInfo().State.Msgs; msgs != 1 {
			t.Errorf("operator: WORK holds %d messages, want 1", msgs)
		}
		// No globex event came from publisher-acme.
		pi, err := c.stream(ctx, events.StreamName).Info(ctx, jetstream.WithSubjectFilter("products.>"))
		if err != nil {
			t.Fatalf("operator: PRODUCTS info: %v", err)
		}
		want := map[string]uint64{stored("products.initech.upsert"): 1, stored("products.acme.upsert"): 3}
		if fmt.Sprint(pi.State.Subjects) != fmt.Sprint(want) {
			t.Errorf("operator: PRODUCTS subjects %v, want %v", pi.State.Subjects, want)
		}

		// Redrive: read the dead letter, republish the event, purge DLQ.
		dl, err := c.js.OrderedConsumer(ctx, "DLQ", jetstream.OrderedConsumerConfig{})
		if err != nil {
			t.Fatalf("operator: DLQ consumer: %v", err)
		}
		if _, err := dl.Next(jetstream.FetchMaxWait(5 * time.Second)); err != nil {
			t.Fatalf("operator: DLQ next: %v", err)
		}
		c.jsPublish(ctx, "work.postgres.acme", []byte(`{"redriven":true}`)) // dlq redrive
		if err := c.stream(ctx, "DLQ").Purge(ctx); err != nil {
			t.Fatalf("operator: purge DLQ: %v", err)
		}

		c.denyAPI("$JS.API.STREAM.DELETE.PRODUCTS", func(ctx context.Context) error {
			return c.js.DeleteStream(ctx, events.StreamName)
		})
		c.denyPublish("$JS.API.STREAM.PURGE.PRODUCTS")
		c.denyPublish("$JS.API.STREAM.MSG.DELETE.PRODUCTS")
		c.denyPublish("$JS.API.STREAM.DELETE.WORK")
		c.denyPublish("$JS.API.STREAM.PURGE.WORK")
		c.denyPublish("$JS.API.STREAM.CREATE.OTHER")
		c.denyPublish("products.acme.upsert")
		c.denyPublish("dlq.postgres.acme")
		c.denySubscribe("products.>")
	})

	run("sys", func(t *testing.T) {
		c := connect(t, url, "sys")
		if n := pingJSZ(t, c, 1); n != 1 {
			t.Errorf("sys: %d JSZ answers, want 1", n)
		}
	})
}

// pingJSZ asks every server for its JetStream report through the system
// account and returns how many answered (waiting for want of them).
func pingJSZ(t testing.TB, c *client, want int) int {
	t.Helper()
	inbox := c.nc.NewInbox()
	sub, err := c.nc.SubscribeSync(inbox)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := c.nc.PublishRequest("$SYS.REQ.SERVER.PING.JSZ", inbox, nil); err != nil {
		t.Fatal(err)
	}
	var n int
	for n < want {
		m, err := sub.NextMsg(5 * time.Second)
		if err != nil {
			break
		}
		var resp struct {
			Server struct{ Name string } `json:"server"`
			Error  *struct{ Description string }
		}
		if err := json.Unmarshal(m.Data, &resp); err != nil || resp.Error != nil || resp.Server.Name == "" {
			t.Errorf("JSZ answer: %v %s", err, m.Data)
			continue
		}
		n++
	}
	return n
}
