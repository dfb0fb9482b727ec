// The in-memory bootstrap store: set / get / wait / add and their timeouts.
#include <gtest/gtest.h>

#include <thread>

#include "runtime/store.h"

namespace eagercomm {
namespace {

using namespace std::chrono_literals;

TEST(HashStore, SetGetReplace) {
  HashStore s;
  ASSERT_TRUE(s.set("k", to_bytes("one")).ok());
  EXPECT_EQ(to_string(s.get("k", 1s).value()), "one");
  ASSERT_TRUE(s.set("k", to_bytes("two")).ok());
  EXPECT_EQ(to_string(s.get("k", 1s).value()), "two");
}

TEST(HashStore, GetWaitsForALaterSet) {
  HashStore s;
  std::thread setter([&] {
    std::this_thread::sleep_for(20ms);
    ASSERT_TRUE(s.set("late", to_bytes("here")).ok());
  });
  auto v = s.get("late", 30s);
  setter.join();
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(to_string(v.value()), "here");
}

TEST(HashStore, TimeoutNamesTheMissingKeys) {
  HashStore s;
  ASSERT_TRUE(s.set("a", {}).ok());
  Status st = s.wait({"a", "b", "c"}, 20ms);
  EXPECT_EQ(st.code(), StatusCode::kTimeout);
  EXPECT_NE(st.message().find("b, c"), std::string::npos) << st.message();
  EXPECT_EQ(st.message().find("a,"), std::string::npos) << st.message();
  EXPECT_EQ(s.get("nope", 5ms).status().code(), StatusCode::kTimeout);
}

// The stores' timeout rule (store.h): 0, -1 and kWaitForever wait without limit, other negative
// values are refused naming the spellings.
void check_timeout_rule(Store& s) {
  for (std::chrono::nanoseconds t :
       {-2ns, std::chrono::nanoseconds(-1s), std::chrono::nanoseconds::min()}) {
    Status st = s.wait({"never"}, t);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << t.count();
    EXPECT_NE(st.message().find("negative"), std::string::npos) << st.message();
    EXPECT_NE(st.message().find("kWaitForever"), std::string::npos) << st.message();
    EXPECT_EQ(s.get("never", t).status().code(), StatusCode::kInvalidArgument) << t.count();
  }
  int n = 0;
  for (std::chrono::nanoseconds t : {0ns, -1ns, std::chrono::nanoseconds::max()}) {
    const std::string key = "later/" + std::to_string(n++);
    std::thread setter([&] {
      std::this_thread::sleep_for(30ms);
      EXPECT_TRUE(s.set(key, to_bytes("v")).ok());
    });
    Result<Bytes> v = s.get(key, t);  // waits past 30 ms, without limit
    setter.join();
    ASSERT_TRUE(v.ok()) << t.count() << ": " << v.status().to_string();
    EXPECT_EQ(to_string(v.value()), "v");
  }
}

TEST(HashStore, TimeoutRule) {
  HashStore s;
  check_timeout_rule(s);
}

TEST(HashStore, AddIsAtomicAcrossThreads) {
  HashStore s;
  std::vector<std::thread> t;
  for (int i = 0; i < 4; ++i) {
    t.emplace_back([&] {
      for (int j = 0; j < 1000; ++j) ASSERT_TRUE(s.add("n", 1).ok());
    });
  }
  for (auto& x : t) x.join();
  EXPECT_EQ(s.add("n", 0).value(), 4000);
  EXPECT_EQ(s.add("n", -4000).value(), 0);
  ASSERT_TRUE(s.set("text", to_bytes("abc")).ok());
  EXPECT_EQ(s.add("text", 1).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace eagercomm

// ---- FileStore: the same contract across processes ----

#include <sys/wait.h>
#include <unistd.h>

#include "runtime/file_store.h"

namespace eagercomm {
namespace {

std::string temp_dir() {
  char tmpl[] = "/tmp/eagercomm-filestore-XXXXXX";
  const char* d = mkdtemp(tmpl);
  EXPECT_NE(d, nullptr);
  return d ? d : "/tmp";
}

TEST(FileStore, SetGetAddWaitAndOddKeys) {
  auto store = FileStore::open(temp_dir());
  ASSERT_TRUE(store.ok());
  FileStore& s = *store.value();
  ASSERT_TRUE(s.set("scope/inbox/3", to_bytes("abc")).ok());
  EXPECT_EQ(to_string(s.get("scope/inbox/3", 1s).value()), "abc");
  ASSERT_TRUE(s.set("scope/inbox/3", to_bytes("second")).ok());
  EXPECT_EQ(to_string(s.get("scope/inbox/3", 1s).value()), "second");
  EXPECT_EQ(s.add("n", 5).value(), 5);
  EXPECT_EQ(s.add("n", -2).value(), 3);
  Status st = s.wait({"scope/inbox/3", "absent key"}, 20ms);
  EXPECT_EQ(st.code(), StatusCode::kTimeout);
  EXPECT_NE(st.message().find("absent key"), std::string::npos);
  EXPECT_FALSE(FileStore::open("").ok());
  EXPECT_FALSE(FileStore::open("/proc/version").ok());
}

TEST(FileStore, TimeoutRule) {
  auto store = FileStore::open(temp_dir());
  ASSERT_TRUE(store.ok());
  check_timeout_rule(*store.value());
}

TEST(FileStore, ProcessesSeeEachOthersKeysAndCountersStayExact) {
  const std::string dir = temp_dir();
  constexpr int kChildren = 3;
  for (int c = 0; c < kChildren; ++c) {
    if (fork() == 0) {
      auto store = FileStore::open(dir);
      if (!store.ok()) _exit(2);
      for (int i = 0; i < 200; ++i) {
        if (!store.value()->add("counter", 1).ok()) _exit(3);
      }
      if (!store.value()->set("child/" + std::to_string(c), to_bytes("up")).ok()) _exit(4);
      // Wait for every sibling's key: a rendezvous across processes.
      std::vector<std::string> keys;
      for (int k = 0; k < kChildren; ++k) keys.push_back("child/" + std::to_string(k));
      _exit(store.value()->wait(keys, 30s).ok() ? 0 : 5);
    }
  }
  for (int c = 0; c < kChildren; ++c) {
    int status = 0;
    ASSERT_GT(wait(&status), 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
  }
  auto store = FileStore::open(dir);
  EXPECT_EQ(store.value()->add("counter", 0).value(), kChildren * 200);
}

}  // namespace
}  // namespace eagercomm
