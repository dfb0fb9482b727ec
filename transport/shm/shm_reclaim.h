// Reclaiming what dead jobs left in /dev/shm.
//
// A rank that dies without cleanup (SIGKILL, a crash, or the parent-death SIGTERM a rank gets
// when its launcher is SIGKILLed) leaves its shared-memory objects behind, and a launcher that
// died cannot remove them either. Every rank that owns shm segments holds a liveness beacon
// (peer_liveness.h) from before its first segment until it starts to shut down, so leftovers
// are recognisable: a beacon whose lock is free while its name is still there belongs to a
// process that is gone.
//
// shm_reclaim_dead_jobs() removes each such dead beacon together with the segments of the same
// owner (`eagercomm-<job>-<scope hash>-<rank>-<n>`, next to its beacon `...-<rank>-0-live`;
// ucx beacons, `eagercomm-<job>-ucx-<instance>-live`, have no segments). It removes nothing it
// cannot prove dead, so it is safe while other jobs run:
//   - an owner whose beacon is locked (running, stopped, hung) or gone (a rank shutting down
//     removes its beacon first, then its segments) keeps everything;
//   - only objects older than kShmReclaimMinAge are touched: a beacon between its creation and
//     its lock is not mistaken for a dead one, and a new job that reuses a dead job's id (ids
//     derived from a store address are reused) keeps the objects it has just created;
//   - objects of other users are left alone (the sticky /dev/shm refuses their removal).
// Several scanners at once (the ranks of concurrent jobs) are harmless: a name removed by one
// is skipped by the others.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace eagercomm {

inline constexpr std::chrono::seconds kShmReclaimMinAge{5};

struct ShmReclaimed {
  int owners = 0;      // dead ranks whose objects were removed
  int objects = 0;     // beacons and segments removed
  uint64_t bytes = 0;  // memory they held
};

// Scans /dev/shm once (a directory listing and a few system calls per eagercomm beacon).
ShmReclaimed shm_reclaim_dead_jobs();

// Removes the segments of the owner of the shm beacon `beacon` ("/eagercomm-...-<rank>-0-live"),
// not the beacon itself; returns how many. For a peer of the same job that has just seen the
// owner dead (LivenessWatch::check()): it calls this before it reaps the beacon, so that no
// segment outlives the beacon that proves its owner dead (a segment without a beacon is never
// reclaimed). When every rank dies at once (the launcher was SIGKILLed), the last to go would
// otherwise reap the others' beacons and orphan their segments.
int shm_remove_dead_owner_segments(const std::string& beacon);

}  // namespace eagercomm
