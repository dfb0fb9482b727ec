// Status and Result: codes, messages, propagation macros.
#include <gtest/gtest.h>

#include <memory>

#include "runtime/status.h"

namespace eagercomm {
namespace {

Result<int> half(int x) {
  if (x % 2) return make_status(StatusCode::kInvalidArgument, "%d is odd", x);
  return x / 2;
}

Result<int> quarter(int x) {
  EC_ASSIGN_OR_RETURN(int h, half(x));
  EC_ASSIGN_OR_RETURN(int q, half(h));
  return q;
}

Status check_even(int x) {
  EC_RETURN_IF_ERROR(half(x).status());
  return Status::Ok();
}

TEST(Status, OkAndErrors) {
  Status ok;
  EXPECT_TRUE(ok.ok());
  EXPECT_EQ(ok.to_string(), "ok");
  Status e = make_status(StatusCode::kTimeout, "rank %d slow", 3);
  EXPECT_FALSE(e.ok());
  EXPECT_EQ(e.to_string(), "timeout: rank 3 slow");
  e.prepend("allreduce: ");
  EXPECT_EQ(e.message(), "allreduce: rank 3 slow");
  EXPECT_TRUE(in_progress().pending_or_ok());
  EXPECT_FALSE(in_progress().ok());
  for (int c = 0; c <= static_cast<int>(StatusCode::kInternal); ++c) {
    EXPECT_FALSE(status_code_name(static_cast<StatusCode>(c)).empty());
    EXPECT_TRUE(is_valid_status_code(c));
  }
  EXPECT_FALSE(is_valid_status_code(200));
}

TEST(Result, ValuesErrorsAndMacros) {
  EXPECT_EQ(quarter(8).value(), 2);
  Result<int> r = quarter(6);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(), "3 is odd");
  EXPECT_TRUE(check_even(4).ok());
  EXPECT_FALSE(check_even(5).ok());
  // A Result made from an ok Status is a bug, reported as such rather than holding no value.
  Result<int> bad{Status::Ok()};
  EXPECT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInternal);
  Result<std::unique_ptr<int>> moved = std::make_unique<int>(7);
  std::unique_ptr<int> p = std::move(moved).value();
  EXPECT_EQ(*p, 7);
}

}  // namespace
}  // namespace eagercomm
