package faults

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// damage is what corruptStore does to a stopped node's SVC_LEAVES message blocks.
type damage int

const (
	truncateBlocks damage = iota // the last block cut to half its length (a torn write, a lost tail)
	scribbleBlocks               // 4 KiB of garbage written into the middle of every block
)

func (d damage) String() string {
	if d == truncateBlocks {
		return "truncated"
	}
	return "corrupted"
}

// corruptStore is Jepsen's lesson (NATS 2.12.1 lost acknowledged writes under
// minority file corruption): a follower killed with kill -9 has its SVC_LEAVES message
// blocks damaged and restarts; once it is back, the leader is killed too, so the
// damaged node must be one of the two that keep the quorum. The cluster must heal (the
// node repairs from its peers) or refuse (no leader: appends stall); it must never hand
// the sequencer a log of record shorter than what was acknowledged. The final checks
// find every acknowledged leaf at its index, and no sequencer may have halted on a
// shorter log (sequencer.ErrShorterLog) unless the cluster lost leaves.
func (r *rig) corruptStore(d damage) {
	r.warm()
	if err := r.c.moveLeaderOff("SVC_LEAVES", 0); err != nil {
		r.t.Fatal(err)
	}
	l := r.c.leaderOf("SVC_LEAVES")
	victim := 3 - l // neither node 0 (log-b's way in) nor the leader
	r.c.kill9(victim)
	blocks, _ := filepath.Glob(filepath.Join(r.c.storeDir(victim), "*", "streams", "SVC_LEAVES", "msgs", "*.blk"))
	if len(blocks) == 0 {
		r.t.Fatalf("node n%d has no SVC_LEAVES message blocks under %s", victim, r.c.storeDir(victim))
	}
	what := damageBlocks(r, d, blocks)
	t0 := time.Now()
	r.c.start(victim)
	rec := r.load.waitRecovered(r.t, t0, 60*time.Second)
	r.recordVs(fmt.Sprintf("node restarted with its SVC_LEAVES store %s", d), rec, r.raw.gap(t0, 60*time.Second), fmt.Sprintf("(n%d: %s)", victim, what))
	time.Sleep(3 * time.Second) // let it rejoin before it must carry the quorum
	t1 := time.Now()
	r.c.kill9(l)
	rec = r.load.waitRecovered(r.t, t1, 60*time.Second)
	r.recordVs("  then the leader killed (the damaged node in the quorum)", rec, r.raw.gap(t1, 60*time.Second), fmt.Sprintf("(n%d killed)", l))
	r.c.start(l)
	for _, p := range r.procs {
		if strings.Contains(p.log.String(), "sequencer stopped appending") || strings.Contains(p.log.String(), "has a gap") {
			r.t.Errorf("%s: a sequencer found the log of record shorter than its tree after n%d's store was %s: the cluster served a shorter log", p.name, victim, d)
		}
	}
}

// damageBlocks truncates or scribbles on the blocks and says what it did.
func damageBlocks(r *rig, d damage, blocks []string) string {
	r.t.Helper()
	switch d {
	case truncateBlocks:
		last := blocks[len(blocks)-1]
		fi, err := os.Stat(last)
		if err != nil {
			r.t.Fatal(err)
		}
		if err := os.Truncate(last, fi.Size()/2); err != nil {
			r.t.Fatal(err)
		}
		return fmt.Sprintf("%s cut from %d to %d bytes", filepath.Base(last), fi.Size(), fi.Size()/2)
	default:
		junk := []byte(strings.Repeat("\xde\xad\xbe\xef", 1024))
		for _, b := range blocks {
			f, err := os.OpenFile(b, os.O_WRONLY, 0)
			if err != nil {
				r.t.Fatal(err)
			}
			fi, _ := f.Stat()
			_, err = f.WriteAt(junk, fi.Size()/2)
			f.Close()
			if err != nil {
				r.t.Fatal(err)
			}
		}
		return fmt.Sprintf("4 KiB of garbage in the middle of %d blocks", len(blocks))
	}
}
