// Package faults is the home of fairway's fault-injection tests, one
// package per kind of fault, each with no code outside its tests:
//
//   - kills: the real binaries as separate processes, killed with SIGKILL
//     under load (`make chaos`);
//   - outage: PostgreSQL restarted, ClickHouse down, a partner answering
//     503, poison events, with the pipeline's parts in one process;
//   - cluster: a 3-node JetStream cluster losing a follower, the stream
//     leader and then its quorum.
//
// docs/reliability.md says what each proves and how to run it.
package faults
