// Package faults is the fault suite of the cluster mode (docs/design/cluster.md), in
// its tests only: a 3-node JetStream cluster of real nats-server processes (killed
// with kill -9, paused with SIGSTOP, partitioned, restarted with damaged store files),
// PostgreSQL and the signer behind switches the test controls, and two real `svc log
// --replicas 3` processes in database mode under load, beside a plain JetStream
// publisher whose gap is the broker's own failover. Each case asserts that no
// acknowledged leaf is lost or moved, no index is given twice, every head handed out
// is a prefix of the final log and no svc process exited, and reports the time to
// recover beside the publisher's. The cluster starts through testkit.BootCluster,
// the one starter of every test cluster (testkit.StartCluster's in-process nodes and
// deploy's configuration files start through it too).
//
//	go test ./internal/faults/        spread, kill -9 of a holder, of a node and of the log of logs' runner, clean stop, damaged store (CI)
//	go tool task test:faults          every case
//	go tool task soak                 DURATION (30m), KILL_EVERY (5m)
//	go tool task bench:cluster        one node against three, same run
package faults
