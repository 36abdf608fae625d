package clickhouse

import (
	"errors"

	ch "github.com/ClickHouse/clickhouse-go/v2"

	"github.com/fairwayhq/fairway/internal/sink"
)

// classifyRules are the ClickHouse sink's rows of the classification
// (sink.Classifier), ahead of the generic rows that take the network and
// time errors: the server exceptions worth retrying, because the server
// is overloaded or a resource is briefly unavailable, not wrong. Other
// exceptions (unknown table, syntax, authentication) need an operator and
// stay unclassified.
var classifyRules = []sink.Rule{
	{Name: "clickhouse 159 TIMEOUT_EXCEEDED", Class: sink.ClassTransient, Match: code(159)},
	{Name: "clickhouse 164 READONLY", Class: sink.ClassTransient, Match: code(164)},
	{Name: "clickhouse 202 TOO_MANY_SIMULTANEOUS_QUERIES", Class: sink.ClassTransient, Match: code(202)},
	{Name: "clickhouse 203 NO_FREE_CONNECTION", Class: sink.ClassTransient, Match: code(203)},
	{Name: "clickhouse 209 SOCKET_TIMEOUT", Class: sink.ClassTransient, Match: code(209)},
	{Name: "clickhouse 210 NETWORK_ERROR", Class: sink.ClassTransient, Match: code(210)},
	{Name: "clickhouse 241 MEMORY_LIMIT_EXCEEDED", Class: sink.ClassTransient, Match: code(241)},
	{Name: "clickhouse 242 TABLE_IS_READ_ONLY", Class: sink.ClassTransient, Match: code(242)},
	{Name: "clickhouse 252 TOO_MANY_PARTS", Class: sink.ClassTransient, Match: code(252)},
	{Name: "clickhouse 319 UNKNOWN_STATUS_OF_INSERT", Class: sink.ClassTransient, Match: code(319)},
	{Name: "clickhouse 999 KEEPER_EXCEPTION", Class: sink.ClassTransient, Match: code(999)},
	{Name: "clickhouse connection pool exhausted", Class: sink.ClassTransient, Match: func(err error) bool {
		return errors.Is(err, ch.ErrAcquireConnTimeout)
	}},
}

var _ sink.Classifier = (*Sink)(nil)

// ClassifyRules implements sink.Classifier.
func (*Sink) ClassifyRules() []sink.Rule { return classifyRules }

func code(c int32) func(error) bool {
	return func(err error) bool {
		var ex *ch.Exception
		return errors.As(err, &ex) && ex.Code == c
	}
}
