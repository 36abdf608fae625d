// Package dashboard serves a small live web page at /ui: per tenant and
// destination the backlog, the age of the oldest waiting event, slots in
// use against the limit, the weight, dead letters and why work waits (the
// rows `fairway status` prints); per destination the throughput and p95
// end-to-end latency over the last minutes.
//
// The page is plain HTML, CSS and JavaScript embedded in the binary: no
// front-end build step. It polls GET /ui/api/status, a JSON Snapshot, every
// Config.Refresh. Viewers share one read of the status source per Refresh;
// each answer holds one page of tenants (Config.PageSize, the most backlog
// first), filtered by a part of the tenant id when asked (Query), so ten
// thousand tenants never make a ten-thousand-row answer. The page keeps
// the page number and filter in its address.
//
// The page draws backlog on a log scale shared by every page, so a backlog
// of 1 is a sliver; every slot in use ("at slot limit") in a calm colour,
// as it is how a busy tenant is held to its share; and the real problems
// in red: dead letters, an open partner circuit, a stream reset.
//
// Throughput and latency come from a Sampler: it reads the sink runners'
// Prometheus metrics (fairway_sink_applied_events_total and
// fairway_sink_end_to_end_seconds, labelled by dest) every few seconds
// from MetricsSources and keeps a ring of samples, so it needs no
// per-tenant labels and no Prometheus server. A source is the /metrics URL
// of a sinks process (Scrape; `fairway serve --sink-metrics`), or the
// registry of this process (Registry; `fairway demo`); several sinks
// processes of one destination add up. Without a Sampler the page says
// "no data" for them and how to get them.
//
// With Deps.Tokens set, GET /ui/api/status asks for a fairway API token
// (Authorization: Bearer, checked on every request through
// internal/bearer, as ingest does): 401 without a valid one; an admin token
// gets every tenant (Snapshot); a tenant token gets TenantSnapshot, built
// from that tenant's rows alone, without the cross-tenant throughput and
// with a failed read's cause withheld. The page and its files need no token;
// the page asks for one on a 401 and keeps it in the tab's sessionStorage.
//
// Users: `fairway serve` and the demo mount Dashboard on their HTTP server;
// they set Deps.Tokens whenever they listen beyond loopback.
package dashboard
