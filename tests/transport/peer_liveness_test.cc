// LivenessBeacon / LivenessWatch: alive while the owner holds the beacon, "left" after it
// destroyed it, "dead" when the owner process was killed.
#include "transport/peer_liveness.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>

namespace eagercomm {
namespace {

std::string unique_name(const char* what) {
  return "/eagercomm-livenesstest-" + std::to_string(getpid()) + "-" + what;
}

TEST(PeerLiveness, AliveWhileHeldLeftAfterTheOwnerDestroysIt) {
  const std::string name = unique_name("left");
  auto beacon = LivenessBeacon::create(name);
  ASSERT_TRUE(beacon.ok()) << beacon.status().to_string();
  auto watch = LivenessWatch::open(name);
  ASSERT_TRUE(watch.ok()) << watch.status().to_string();
  EXPECT_EQ(watch->check(), LivenessWatch::State::kAlive);
  EXPECT_EQ(watch->check(), LivenessWatch::State::kAlive);  // probing does not steal the lock
  beacon->reset();
  EXPECT_EQ(watch->check(), LivenessWatch::State::kLeft);
  EXPECT_EQ(shm_unlink(name.c_str()), -1) << "the name must be gone";
}

TEST(PeerLiveness, DeadWhenTheOwnerProcessIsKilled) {
  const std::string name = unique_name("dead");
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto beacon = LivenessBeacon::create(name);
    const char ok = beacon.ok() ? 1 : 0;
    (void)!write(ready[1], &ok, 1);
    pause();
    _exit(0);
  }
  char ok = 0;
  ASSERT_EQ(read(ready[0], &ok, 1), 1);
  ASSERT_EQ(ok, 1);
  auto watch = LivenessWatch::open(name);
  ASSERT_TRUE(watch.ok()) << watch.status().to_string();
  EXPECT_EQ(watch->check(), LivenessWatch::State::kAlive);
  kill(child, SIGKILL);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_EQ(watch->check(), LivenessWatch::State::kDead);
  close(ready[0]);
  close(ready[1]);
  {
    // A watcher removes the dead owner's name; every watcher, the reaper included, still reads
    // kDead (not kLeft, which a normal exit gives), and a second reap is harmless.
    auto other = LivenessWatch::open(name);
    ASSERT_TRUE(other.ok());
    EXPECT_TRUE(other->reap());
    EXPECT_FALSE(LivenessWatch::open(name).ok());  // the name is gone from /dev/shm
    EXPECT_EQ(other->check(), LivenessWatch::State::kDead);
    EXPECT_EQ(watch->check(), LivenessWatch::State::kDead);
    EXPECT_TRUE(other->reap());
  }
  // The next run with the same name takes the stale object over.
  auto again = LivenessBeacon::create(name);
  ASSERT_TRUE(again.ok()) << again.status().to_string();
  auto fresh = LivenessWatch::open(name);
  ASSERT_TRUE(fresh.ok());
  EXPECT_EQ(fresh->check(), LivenessWatch::State::kAlive);
  // The old watch still looks at the killed owner's (now unlinked) object.
  EXPECT_NE(watch->check(), LivenessWatch::State::kAlive);
}

TEST(PeerLiveness, MissingBeaconIsUnavailableAndAnInvalidWatchSaysAlive) {
  auto watch = LivenessWatch::open(unique_name("never-made"));
  ASSERT_FALSE(watch.ok());
  EXPECT_EQ(watch.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(watch.status().message().find("never-made"), std::string::npos);
  LivenessWatch none;
  EXPECT_EQ(none.check(), LivenessWatch::State::kAlive);
  auto bad = LivenessBeacon::create("no-leading-slash/and/slashes");
  EXPECT_FALSE(bad.ok());
}

}  // namespace
}  // namespace eagercomm
