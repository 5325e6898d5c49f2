package main

import (
	"math"
	"os"

	"github.com/KimMachineGun/automemlimit/memlimit"
	"github.com/hashicorp/go-hclog"
)

// memoryShare is the most of a cgroup memory limit the Go heap may grow
// to; the rest is for what the collector does not count (the embedded
// NATS server's file reads, the mapped data file's pages, the plugins'
// memory outside the heap, the router's own code).
const memoryShare = 0.9

// fileReserve is what a small group keeps, beyond that share, for the
// pages of files the kernel counts against it as it counts the heap: the
// router's own code (a 31 MB text segment, ~25 MB of it resident while it
// runs), the pages of the mapped data file it reads, the embedded NATS
// server's block files. A heap allowed 90% of a 128 MiB group left them
// ~13 MB: a start after a kill under load, whose check of the embedded
// broker held ~61 MB live, re-read its code from the disk for minutes;
// with the heap held to 96 MiB it started in 24–36 s, and a 64 MiB group
// whose heap was held to 32 MiB started where it had been killed
// (BENCHMARKS.md, "The restart after a crash"). Half the group is the
// least the heap is given; below 64 MiB the router hardly runs at all.
const fileReserve = 32 << 20

// memoryCeiling is the most the collector's memory limit may be: a share
// of the memory limit of the process's cgroup (systemd's MemoryMax=, a
// container's --memory), v1 or v2, read by automemlimit; 0 when there is
// none. A limited router collected as though it had the machine's memory,
// and the kernel killed it first (a memory trial):
// docs/decisions/memory-limit.md.
func memoryCeiling() int64 {
	return ceilingOf(memlimit.FromCgroup())
}

// ceilingOf is memoryCeiling for a cgroup limit read (err: none).
func ceilingOf(limit uint64, err error) int64 {
	if err != nil || limit == 0 || limit > math.MaxInt64/2 { // unlimited v1 groups say 2^63 less a page
		return 0
	}
	l := int64(limit)
	return min(int64(float64(l)*memoryShare), max(l/2, l-fileReserve))
}

// heldOutputBound is the bytes of outputs the router's batches may hold at
// once under ceiling: a quarter of it, from 8 MiB to the engine's default
// 64 MiB (0, the default, without a ceiling). Two copies of what is held
// can be on the heap at a time (garbage not yet collected), with the
// embedded server's and the router's own beside them: in a 128 MiB group
// the default's 64 MiB of 256 KiB events got the router killed (a memory
// trial).
func heldOutputBound(ceiling int64) int64 {
	if ceiling <= 0 {
		return 0
	}
	return min(max(ceiling/4, 8<<20), 64<<20)
}

// tooSmall is the cgroup memory limit under which the router warns at
// start (a ceiling under the one it gives): below it a start after a
// kill was seen to fail.
const tooSmall = 64 << 20

// logMemoryBudget says, at start, what a cgroup memory limit made of the
// router's memory (nothing without one): the collector's ceiling, unless
// GOMEMLIMIT or GOGC rules it, and the batches' bound. An operator who set
// MemoryMax= saw neither (a review).
func logMemoryBudget(log hclog.Logger, ceiling int64) {
	if ceiling <= 0 {
		return
	}
	if ceiling < ceilingOf(tooSmall, nil) {
		log.Warn("the cgroup's memory limit is under 64 MiB: the router's own code takes ~25 MB of it, the embedded NATS server more, and a start after a kill may not fit; give it 128 MiB",
			"collector_ceiling_bytes", ceiling, "why", "docs/decisions/memory-limit.md")
	}
	if os.Getenv("GOMEMLIMIT") != "" || os.Getenv("GOGC") != "" {
		log.Info("under a cgroup memory limit; the collector follows GOMEMLIMIT or GOGC", "cgroup_share_bytes", ceiling,
			"held_outputs_max_bytes", heldOutputBound(ceiling), "why", "docs/decisions/memory-limit.md")
		return
	}
	log.Info("under a cgroup memory limit", "collector_ceiling_bytes", ceiling,
		"held_outputs_max_bytes", heldOutputBound(ceiling), "why", "docs/decisions/memory-limit.md")
}
