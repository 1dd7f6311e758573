// Package faults is the fault suite of the cluster mode (docs/design/cluster.md), in
// its tests only: an in-process 3-node JetStream cluster, PostgreSQL and the signer
// behind switches the test controls, and two real `svc log --replicas 3` processes in
// database mode under load. Each case asserts that no acknowledged leaf is lost or
// moved, no index is given twice and every head handed out is a prefix of the final
// log, and reports the time to recover.
//
//	go test ./internal/faults/        spread, kill -9, clean stop, stream leader lost (CI)
//	go tool task test:faults          every case
//	go tool task soak                 DURATION (30m), KILL_EVERY (5m)
//	go tool task bench:cluster        one node against three, same run
package faults
