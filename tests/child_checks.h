// Checks inside a forked child process (tests that fork one process per rank): print what failed
// and _exit non-zero, which the parent reports. GoogleTest's assertions do not cross fork().
#pragma once

#include <unistd.h>

#include <cstdio>

namespace eagercomm::test {

// The rank a child runs as, for its failure messages (set by the child after fork()).
inline int g_rank = -1;

}  // namespace eagercomm::test

#define CHILD_CHECK(cond, ...)                                                                   \
  do {                                                                                           \
    if (!(cond)) {                                                                               \
      fprintf(stderr, "rank %d: %s:%d: check failed: %s: ", ::eagercomm::test::g_rank, __FILE__, \
              __LINE__, #cond);                                                                  \
      fprintf(stderr, __VA_ARGS__);                                                              \
      fputc('\n', stderr);                                                                       \
      _exit(1);                                                                                  \
    }                                                                                            \
  } while (0)
#define CHILD_OK(expr)                                                        \
  do {                                                                        \
    const Status child_status_ = (expr);                                      \
    CHILD_CHECK(child_status_.ok(), "%s", child_status_.to_string().c_str()); \
  } while (0)
// Declares `lhs` as the value of the Result `expr`, or fails the child.
#define CHILD_VALUE(lhs, expr)                                                     \
  auto lhs##_result = (expr);                                                      \
  CHILD_CHECK(lhs##_result.ok(), "%s", lhs##_result.status().to_string().c_str()); \
  auto lhs = std::move(lhs##_result).value()
