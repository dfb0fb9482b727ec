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
