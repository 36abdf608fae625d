package bootstrap

import (
	"github.com/fairwayhq/fairway/pkg/tenancy"
)

// Default listen addresses. Each service, and each sink destination with a
// fixed name, has a port of its own, so one host runs all of them without
// a --listen; replicas of one service (or of one destination's sink) on
// one host each need their own --listen.
const (
	// IngestListenDefault serves ingest's API, /metrics and /healthz.
	IngestListenDefault = "127.0.0.1:8080"
	// DispatcherListenDefault serves the dispatcher's /metrics and /healthz.
	DispatcherListenDefault = "127.0.0.1:8081"
	// DashboardListenDefault serves `fairway serve`.
	DashboardListenDefault = "127.0.0.1:8090"
	// SinksPostgresListenDefault and SinksClickHouseListenDefault serve
	// the /metrics and /healthz of `sinks --dest postgres` and
	// `sinks --dest clickhouse`.
	SinksPostgresListenDefault   = "127.0.0.1:9102"
	SinksClickHouseListenDefault = "127.0.0.1:9103"
	// SinksB2BListenDefault serves `sinks --dest b2b:<partner>`, and the
	// sinks of any other kind without a port above: a free port chosen at
	// start (and logged), since a host may run the sinks of any number of
	// partners; give each a --listen to scrape it at a fixed address.
	SinksB2BListenDefault = "127.0.0.1:0"
)

// SinksListenDefault returns the default --listen of `sinks --dest dest`.
func SinksListenDefault(dest string) string {
	switch dest {
	case tenancy.DestPostgres:
		return SinksPostgresListenDefault
	case tenancy.DestClickHouse:
		return SinksClickHouseListenDefault
	}
	return SinksB2BListenDefault
}
