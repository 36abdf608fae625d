package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fairwayhq/fairway/internal/dlq"
	"github.com/fairwayhq/fairway/internal/ingest"
	"github.com/fairwayhq/fairway/internal/testenv"
	"github.com/fairwayhq/fairway/internal/work"
	"github.com/fairwayhq/fairway/pkg/events"
)

// Bounds of the waits. They are generous (a loaded 2-core machine running
// -race); the test waits on conditions and is usually far below them.
const (
	waitState     = 60 * time.Second // a stream leader, a catch-up, a recovery
	noQuorumLimit = 15 * time.Second // ingest must answer within this without quorum
)

// TestNATSFailover runs the pipeline against a 3-node JetStream cluster
// (R3 streams) under traffic from five tenants while nodes fail:
//
//  1. a follower of PRODUCTS stops, and is restarted later;
//  2. the leader of PRODUCTS stops, and is restarted later;
//  3. two of three nodes stop (no quorum): ingest must answer 503 with a
//     clear reason in bounded time, and serve again after the restart
//     without any service being restarted.
//
// At the end every event ingest acknowledged is in catalog.products at its
// version, the events whose post failed are posted again and applied too,
// no slot is held, and nothing was dead-lettered.
func TestNATSFailover(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	testStart := time.Now()
	log := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))

	cl := startCluster(t)
	admin, err := nats.Connect(cl.urls(), nats.Name("failover-test"), nats.MaxReconnects(-1),
		nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		t.Fatalf("connect to the cluster: %v", err)
	}
	t.Cleanup(admin.Close)
	js, err := jetstream.New(admin)
	if err != nil {
		t.Fatal(err)
	}
	createStreams(ctx, t, js)
	streams := []string{events.StreamName, work.StreamName, dlq.StreamName}
	waitStreams(ctx, t, js, replicas, waitState, streams...)

	tenants := []string{"acme", "globex", "initech", "umbrella", "hooli"}
	p := startPipeline(t, cl.urls(), log, tenants)
	c := p.newClient()
	l := newLedger()
	trafficCtx, stopTraffic := context.WithCancel(ctx)
	defer stopTraffic()
	senders := traffic(trafficCtx, c, l, tenants, 5, 50*time.Millisecond)
	t.Cleanup(func() { stopTraffic(); senders.Wait() })

	// Warm up: events flow end to end before any fault.
	waitAccepted(t, l, 200)
	t.Logf("warm-up: %d events accepted in %s", count(l), time.Since(testStart).Round(time.Millisecond))

	// Fault 1: a follower of PRODUCTS stops under traffic.
	h := streamHealthOrFail(ctx, t, js, events.StreamName)
	follower := -1
	for i, n := range cl.nodes {
		if n.name != h.leader {
			follower = i
			break
		}
	}
	t.Logf("fault 1: stopping follower %s (PRODUCTS leader %s)", cl.nodes[follower].name, h.leader)
	stopped := time.Now()
	cl.stop(follower)
	before := count(l)
	waitAccepted(t, l, before+200)
	t.Logf("fault 1: %d more events accepted with %s down, in %s", count(l)-before, cl.nodes[follower].name,
		time.Since(stopped).Round(time.Millisecond))
	restartNode(t, cl, js, p, l, follower, streams)

	// Fault 2: the leader of PRODUCTS stops under traffic.
	h = streamHealthOrFail(ctx, t, js, events.StreamName)
	leader := cl.index(h.leader)
	t.Logf("fault 2: stopping PRODUCTS leader %s", h.leader)
	stopped = time.Now()
	cl.stop(leader)
	answered := waitOKAfter(t, l, stopped)
	t.Logf("fault 2: first post sent after the leader stopped was accepted %s after the stop",
		answered.Sub(stopped).Round(time.Millisecond))
	waitStreams(ctx, t, js, replicas-1, waitState, events.StreamName)
	nh := streamHealthOrFail(ctx, t, js, events.StreamName)
	t.Logf("fault 2: new PRODUCTS leader %s", nh.leader)
	before = count(l)
	waitAccepted(t, l, before+200)
	restartNode(t, cl, js, p, l, leader, streams)

	// Fault 3: two of three nodes stop; no stream has a quorum.
	h = streamHealthOrFail(ctx, t, js, events.StreamName)
	down := []int{cl.index(h.leader)}
	for i := range cl.nodes {
		if i != down[0] {
			down = append(down, i)
			break
		}
	}
	t.Logf("fault 3: stopping %s and %s: no quorum", cl.nodes[down[0]].name, cl.nodes[down[1]].name)
	_, _, _, failsBefore := l.counts()
	lost := time.Now()
	for _, i := range down {
		cl.stop(i)
	}
	probe := c.post(ctx, "acme", []event{{tenant: "acme", product: "probe-no-quorum", version: 1}})
	t.Logf("fault 3: ingest answered %d in %s: %s", probe.status, probe.took.Round(time.Millisecond), strings.TrimSpace(string(probe.body)))
	if probe.err != nil || probe.status < 500 || probe.took > noQuorumLimit {
		t.Fatalf("without quorum ingest answered status %d in %s (err %v), want a 5xx within %s; body: %s",
			probe.status, probe.took, probe.err, noQuorumLimit, probe.body)
	}
	var pr ingest.EventsResponse
	if err := json.Unmarshal(probe.body, &pr); err != nil || probe.status != http.StatusServiceUnavailable ||
		probe.header.Get("Retry-After") == "" || pr.Failed != 1 || len(pr.Results) != 1 ||
		!strings.HasPrefix(pr.Results[0].Error, "not stored: publish: ") || len(pr.Results[0].Error) < len("not stored: publish: ")+5 {
		t.Errorf("without quorum: status %d, Retry-After %q, body %s; want 503 with Retry-After saying the event was not stored and why",
			probe.status, probe.header.Get("Retry-After"), probe.body)
	}
	l.record(probe) // the probe event is retried after recovery like the rest
	// Stay without quorum a while under traffic: every tenant's posts fail,
	// and publishes that nobody answers pile up in ingest's JetStream
	// context (they must time out, not stall ingest for good).
	waitFailedPosts(t, l, failsBefore+3*len(tenants))
	time.Sleep(time.Until(lost.Add(12 * time.Second))) // keep the outage going
	_, _, _, fails := l.counts()
	t.Logf("fault 3: %d posts failed during the outage; %d publishes pending in ingest's JetStream context",
		fails-failsBefore, p.IngestJS.PublishAsyncPending())
	restarted := time.Now()
	for _, i := range down {
		cl.start(i)
	}
	answered = waitOKAfter(t, l, restarted)
	t.Logf("fault 3: quorum lost for %s; first post sent after the restart was accepted %s after it",
		restarted.Sub(lost).Round(time.Millisecond), answered.Sub(restarted).Round(time.Millisecond))
	waitStreams(ctx, t, js, replicas, waitState, streams...)

	// Traffic stops; the clients retry what failed, until it is accepted.
	before = count(l)
	waitAccepted(t, l, before+100)
	stopTraffic()
	senders.Wait()
	_, retries, posts, failPosts := l.counts()
	retried := retryFailed(t, c, l)
	accepted := l.snapshot()
	catchUp := p.waitApplied(t, accepted, waitState)

	// No slot stays held, nothing waits as an orphan, nothing was
	// dead-lettered.
	testenv.Eventually(t, waitState, "no slot held, no orphaned batch", func() error {
		held, orphans, err := p.heldSlots(ctx)
		if err == nil && (held > 0 || orphans > 0) {
			err = fmt.Errorf("%d slots held, %d orphaned batches", held, orphans)
		}
		return err
	})
	// Publishes nobody answered during the outage time out of ingest's
	// JetStream context; none stays pending.
	testenv.Eventually(t, waitState, "no publish pending in ingest's JetStream context", func() error {
		if n := p.IngestJS.PublishAsyncPending(); n != 0 {
			return fmt.Errorf("%d publishes pending", n)
		}
		return nil
	})
	dl, err := js.Stream(ctx, dlq.StreamName)
	if err != nil {
		t.Fatal(err)
	}
	if n := dl.CachedInfo().State.Msgs; n != 0 {
		t.Errorf("%d dead letters; want none", n)
	}
	n, missing, err := p.applied(ctx, accepted)
	if err != nil || n != len(accepted) {
		t.Fatalf("%d of %d accepted events applied (err %v); e.g. missing %+v", n, len(accepted), err, missing)
	}
	t.Logf("summary: %d posts, %d failed (%d events to retry, %d of them re-posted and accepted); "+
		"%d events accepted, %d applied, %d lost; last catch-up %s; test took %s",
		posts, failPosts, retries, retried, len(accepted), n, len(accepted)-n,
		catchUp.Round(time.Millisecond), time.Since(testStart).Round(time.Millisecond))
}

// restartNode restarts node i and logs how long until the node's replicas
// are current again and every event accepted so far is applied.
func restartNode(t *testing.T, cl *natsCluster, js jetstream.JetStream, p *pipe, l *ledger, i int, streams []string) {
	t.Helper()
	start := time.Now()
	cl.start(i)
	cl.waitMetaLeader(waitState)
	waitStreams(t.Context(), t, js, replicas, waitState, streams...)
	current := time.Since(start)
	snap := l.snapshot()
	catchUp := p.waitApplied(t, snap, waitState)
	t.Logf("restart %s: replicas current after %s; all %d events accepted so far applied %s later",
		cl.nodes[i].name, current.Round(time.Millisecond), len(snap), catchUp.Round(time.Millisecond))
}

func count(l *ledger) int {
	n, _, _, _ := l.counts()
	return n
}

func waitAccepted(t *testing.T, l *ledger, n int) {
	t.Helper()
	testenv.Eventually(t, waitState, fmt.Sprintf("%d events accepted", n), func() error {
		if got := count(l); got < n {
			return fmt.Errorf("%d accepted", got)
		}
		return nil
	})
}

func waitFailedPosts(t *testing.T, l *ledger, n int) {
	t.Helper()
	testenv.Eventually(t, waitState, fmt.Sprintf("%d failed posts", n), func() error {
		if _, _, _, f := l.counts(); f < n {
			return fmt.Errorf("%d failed posts", f)
		}
		return nil
	})
}

func waitOKAfter(t *testing.T, l *ledger, after time.Time) time.Time {
	t.Helper()
	var at time.Time
	testenv.Eventually(t, waitState, "a post sent after "+after.Format(time.TimeOnly)+" to be accepted", func() error {
		var ok bool
		if at, ok = l.firstOKAfter(after); !ok {
			return errors.New("none accepted yet")
		}
		return nil
	})
	return at
}

func streamHealthOrFail(ctx context.Context, t *testing.T, js jetstream.JetStream, name string) streamHealth {
	t.Helper()
	h, err := getStreamHealth(ctx, js, name)
	if err != nil || h.leader == "" {
		t.Fatalf("stream %s: %+v, %v", name, h, err)
	}
	return h
}

// retryFailed posts every event whose post failed again, per tenant, until
// ingest accepts all of them (a repeat of an event that was stored after
// all is a duplicate with its original sequence). It returns how many
// events it had to re-post.
func retryFailed(t *testing.T, c *client, l *ledger) int {
	t.Helper()
	evs := l.takeRetries()
	total := len(evs)
	deadline := time.Now().Add(waitState)
	for len(evs) > 0 {
		by := map[string][]event{}
		for _, e := range evs {
			by[e.tenant] = append(by[e.tenant], e)
		}
		for tn, es := range by {
			r := c.post(t.Context(), tn, es)
			l.record(r)
			if len(r.failed) > 0 && time.Now().After(deadline) {
				t.Fatalf("re-posting %d events of %s: status %d, %d still failing: %v %s", len(es), tn, r.status, len(r.failed), r.err, r.body)
			}
		}
		if evs = l.takeRetries(); len(evs) > 0 {
			time.Sleep(time.Second) // as Retry-After asks
		}
	}
	return total
}
