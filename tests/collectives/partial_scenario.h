// Test harness for partial allreduce: every rank runs the eager-SGD loop (post, apply whatever
// completed, wait only when nothing completed since the previous post) with seeded random
// delays, then flushes and drains, recording every result it receives.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <random>
#include <thread>

#include "collectives/partial_allreduce.h"
#include "tests/harness/thread_world.h"

namespace eagercomm::test {

struct Scenario {
  int ranks = 4;
  PartialMode mode = PartialMode::solo();
  PartialOptions options;
  int iterations = 200;  // posts per rank
  size_t count = 37;
  double delay_probability = 0.3;
  int max_delay_us = 800;
  uint64_t seed = 1;
  bool ones = false;   // every gradient all ones (drop accounting)
  int slow_rank = -1;  // this rank sleeps slow_delay_ms before every post
  int slow_delay_ms = 0;
  int slow_iterations = -1;  // the slow rank's posts (-1: iterations)
  bool rotate_slow = false;  // instead of slow_rank: rank it % ranks sleeps before post it
  std::vector<std::pair<std::string, std::string>> config;
};

struct Received {
  uint64_t round;
  std::vector<float> data;
  std::vector<int> fresh;  // per rank 0/1
  std::vector<int> age;    // per rank, -1 none
  std::vector<int> posts;  // per rank: posts folded into its contribution
  int fresh_count;
  int max_age;
};

struct RankRecord {
  std::vector<Received> results;
  std::vector<double> posted;  // elementwise sum of this rank's posts
  uint64_t posts = 0;
  uint64_t dropped = 0;
  uint64_t activated_at_flush = 0;  // rounds this rank had entered when it began flushing
  uint64_t flush_round = 0;
  bool in_boxes = false;  // PartialStats::rounds_in_boxes
  double loop_ms = 0;     // time for the posting loop
  // Mailbox messages this rank sent during the first half of the loop (no rank flushes yet: a
  // flushing rank's peers may set off rounds with messages).
  uint64_t loop_messages = 0;
  Status error;
};

inline float gradient_value(int rank, int iteration, size_t j) {
  return static_cast<float>(static_cast<int>((rank * 31 + iteration * 7 + j) % 9) - 4);
}

inline Received copy_result(const RoundResult& r, int P) {
  Received out;
  out.round = r.round();
  auto d = r.as<float>();
  out.data.assign(d.begin(), d.end());
  for (int q = 0; q < P; ++q) {
    out.fresh.push_back(r.fresh(q) ? 1 : 0);
    out.age.push_back(r.age(q));
    out.posts.push_back(r.posts(q));
  }
  out.fresh_count = r.fresh_count();
  out.max_age = r.max_age();
  return out;
}

// A hash of every result a rank received, in order (data, fresh flags, round): equal on every
// rank exactly when the replicas applied the same rounds.
inline uint64_t results_hash(const std::vector<Received>& results) {
  uint64_t hash = 1469598103934665603ull;
  for (const Received& x : results) {
    const auto* p = reinterpret_cast<const uint8_t*>(x.data.data());
    for (size_t i = 0; i < x.data.size() * sizeof(float); ++i) {
      hash = (hash ^ p[i]) * 1099511628211ull;
    }
    for (int f : x.fresh) hash = (hash ^ static_cast<uint64_t>(f)) * 1099511628211ull;
    hash = (hash ^ x.round) * 1099511628211ull;
  }
  return hash;
}

// The elementwise sum of every result a rank received (integers: exact in f64), which equals
// the sum of everybody's posts when nothing was lost or counted twice.
inline std::vector<double> results_sum(const std::vector<Received>& results, size_t count) {
  std::vector<double> sum(count, 0.0);
  for (const Received& x : results) {
    for (size_t j = 0; j < count; ++j) sum[j] += x.data[j];
  }
  return sum;
}

// One rank's part of a scenario: create, run the eager loop, flush, record. Errors are kept in
// the record (the caller checks them), so that every rank returns.
inline RankRecord run_rank(int rank, Communicator& comm, const Scenario& s) {
  const auto kTimeout = std::chrono::seconds(120);
  RankRecord me;
  auto made = PartialAllreduce::create(comm, s.count, DataType::kFloat32, s.mode, s.options);
  if (!made.ok()) {
    me.error = made.status();
    return me;
  }
  PartialAllreduce& pa = *made.value();
  me.posted.assign(s.count, 0.0);
  std::mt19937_64 rng(s.seed * 1000003 + rank);
  std::uniform_real_distribution<double> coin(0, 1);
  std::vector<float> grad(s.count);
  std::function<void(RoundResult &&)> take = [&](RoundResult&& r) {
    me.results.push_back(copy_result(r, comm.size()));
  };
  const int my_iterations =
      rank == s.slow_rank && s.slow_iterations >= 0 ? s.slow_iterations : s.iterations;
  const uint64_t sent_before = comm.stats().messages_sent;
  const auto t0 = std::chrono::steady_clock::now();
  for (int it = 0; it < my_iterations; ++it) {
    if (it == my_iterations / 2) me.loop_messages = comm.stats().messages_sent - sent_before;
    const bool slow_now = s.rotate_slow ? it % s.ranks == rank : rank == s.slow_rank;
    if (slow_now && s.slow_delay_ms > 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(s.slow_delay_ms));
    } else if (s.max_delay_us > 0 && coin(rng) < s.delay_probability) {
      std::this_thread::sleep_for(
          std::chrono::microseconds(static_cast<int>(coin(rng) * s.max_delay_us)));
    }
    for (size_t j = 0; j < s.count; ++j) {
      grad[j] = s.ones ? 1.0f : gradient_value(rank, it, j);
      me.posted[j] += grad[j];
    }
    Status st = pa.post(grad.data(), s.count, DataType::kFloat32);
    if (!st.ok()) {
      me.error = st;
      return me;
    }
    bool got = false;
    for (;;) {
      auto r = pa.poll();
      if (!r.ok()) {
        me.error = r.status();
        return me;
      }
      if (!r.value()) break;
      take(std::move(*r.value()));
      got = true;
    }
    if (!got) {
      auto r = pa.wait(kTimeout);
      if (!r.ok()) {
        me.error = r.status();
        return me;
      }
      take(std::move(r.value()));
    }
  }
  me.loop_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  me.activated_at_flush = pa.stats().rounds_activated;
  me.in_boxes = pa.stats().rounds_in_boxes;
  auto f = pa.flush(take);
  if (!f.ok()) {
    me.error = f.status();
    return me;
  }
  me.flush_round = f.value();
  me.posts = pa.stats().posts;
  me.dropped = pa.stats().dropped_posts;
  return me;
}

// Runs `s` with ranks as threads and returns each rank's record; fails the test on errors.
inline std::vector<RankRecord> run_scenario(const Scenario& s) {
  auto w = World::make(s.ranks, test_config(s.config));
  std::vector<RankRecord> rec(s.ranks);
  w->run([&](int rank, Communicator& comm) { rec[rank] = run_rank(rank, comm, s); });
  for (int r = 0; r < s.ranks; ++r) {
    EXPECT_TRUE(rec[r].error.ok()) << "rank " << r << ": " << rec[r].error.to_string();
  }
  return rec;
}

}  // namespace eagercomm::test
