// Package cluster holds the NATS failover fault test: a 3-node embedded
// JetStream cluster with the pipeline's streams at three replicas, the real
// ingest API, dispatcher and PostgreSQL sink runner in process, and nodes
// stopped and restarted under traffic (one follower, the stream leader, then
// two of three for a loss of quorum). The test proves that every event
// ingest acknowledged is applied and that no slot stays held. See
// docs/reliability.md ("NATS failover").
package cluster
