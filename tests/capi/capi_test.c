/* The C API (<eagercomm/eagercomm.h>) end to end, compiled as C11: run by eagercomm-run with 2
 * and 3 processes (ctest: capi_test_2, capi_test_3). Every collective against references
 * computed here, partial allreduce conservation, the store-address path, and bad input, each
 * with the code and a message naming the problem. Prints every failed check; exit 1 if any. */
#define _POSIX_C_SOURCE 200809L

#include <arpa/inet.h>
#include <eagercomm/eagercomm.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static int g_rank = -1;
static int g_failures = 0;

static void fail(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "rank %d: FAIL: ", g_rank);
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
  ++g_failures;
}

/* A call that must succeed; stops the test when it does not (the ranks would diverge). */
#define MUST(call)                                                                                 \
  do {                                                                                             \
    ec_status s_ = (call);                                                                         \
    if (s_ != EC_OK) {                                                                             \
      fprintf(stderr, "rank %d: FATAL: %s at %s:%d: %s (%s)\n", g_rank, #call, __FILE__, __LINE__, \
              ec_status_name(s_), ec_last_error());                                                \
      exit(1);                                                                                     \
    }                                                                                              \
    if (ec_last_error()[0] != '\0') fail("%s succeeded but left a message", #call);                \
  } while (0)

/* `got` must be `want`, with a message that names the function and contains `needle`. */
static void expect_error(const char* what, ec_status got, ec_status want, const char* fn,
                         const char* needle) {
  const char* msg = ec_last_error();
  if (got != want) {
    fail("%s: got %s (%s), want %s", what, ec_status_name(got), msg, ec_status_name(want));
    return;
  }
  if (strstr(msg, fn) == NULL || strstr(msg, needle) == NULL) {
    fail("%s: message '%s' does not name '%s' and '%s'", what, msg, fn, needle);
  }
  if (strstr(msg, ec_status_name(want)) != msg) {
    fail("%s: message '%s' does not start with the code's name", what, msg);
  }
}

/* IEEE binary16 of a small integer (exact), and back. */
static uint16_t half_of_int(int v) {
  if (v == 0) return 0;
  const uint16_t sign = v < 0 ? 0x8000 : 0;
  unsigned m = (unsigned)(v < 0 ? -v : v);
  int e = 0;
  while ((m >> e) > 1) ++e;
  const unsigned frac = (m << (10 - e)) & 0x3ff; /* exact for |v| < 2048 */
  return (uint16_t)(sign | (unsigned)((e + 15) << 10) | frac);
}
static uint16_t bf16_of_int(int v) {
  float f = (float)v;
  uint32_t bits;
  memcpy(&bits, &f, 4);
  return (uint16_t)(bits >> 16); /* exact for |v| < 256 */
}

/* ---- collectives ---- */

static void check_allreduce(ec_comm* comm, int rank, int size) {
  enum { N = 1000 };
  static float f32[N], f32_out[N];
  static double f64[N];
  static int32_t i32[N], i32_out[N];
  static int64_t i64[N];
  static uint16_t f16[N], bf16[N];
  for (int i = 0; i < N; ++i) {
    f32[i] = (float)(rank + 1) * (float)(i % 7);
    f64[i] = (double)(rank * 1000 + i);
    i32[i] = (rank % 2 ? -1 : 1) * (i + rank);
    i64[i] = ((int64_t)1 << 40) * rank + i;
    f16[i] = half_of_int(rank + i % 5);
    bf16[i] = bf16_of_int(rank - i % 3);
  }
  MUST(ec_allreduce(comm, f32, f32_out, N, EC_FLOAT32, EC_SUM, EC_TIMEOUT_DEFAULT));
  MUST(ec_allreduce(comm, f64, f64, N, EC_FLOAT64, EC_MAX, 60000)); /* in place */
  MUST(ec_allreduce(comm, i32, i32_out, N, EC_INT32, EC_MIN, EC_TIMEOUT_INFINITE));
  MUST(ec_allreduce(comm, i64, i64, N, EC_INT64, EC_SUM, EC_TIMEOUT_DEFAULT));
  MUST(ec_allreduce(comm, f16, f16, N, EC_FLOAT16, EC_SUM, EC_TIMEOUT_DEFAULT));
  /* The _on_stream form: the stream is ignored for host buffers (this handle is no stream). */
  MUST(ec_allreduce_on_stream(comm, bf16, bf16, N, EC_BFLOAT16, EC_SUM, (void*)0x1234, 60000));
  int wrong[6] = {0};
  const int sum_ranks = size * (size - 1) / 2;
  for (int i = 0; i < N; ++i) {
    if (f32_out[i] != (float)(sum_ranks + size) * (float)(i % 7)) ++wrong[0];
    if (f64[i] != (double)((size - 1) * 1000 + i)) ++wrong[1];
    int32_t mn = INT32_MAX;
    for (int r = 0; r < size; ++r) {
      const int32_t v = (r % 2 ? -1 : 1) * (i + r);
      if (v < mn) mn = v;
    }
    if (i32_out[i] != mn) ++wrong[2];
    if (i64[i] != ((int64_t)1 << 40) * sum_ranks + (int64_t)size * i) ++wrong[3];
    if (f16[i] != half_of_int(sum_ranks + size * (i % 5))) ++wrong[4];
    if (bf16[i] != bf16_of_int(sum_ranks - size * (i % 3))) ++wrong[5];
  }
  const char* names[6] = {"f32 sum", "f64 max in place", "i32 min",
                          "i64 sum", "f16 sum",          "bf16 sum"};
  for (int k = 0; k < 6; ++k) {
    if (wrong[k]) fail("allreduce %s: %d of %d elements wrong", names[k], wrong[k], N);
  }
  /* count 0 is allowed, with null buffers. */
  MUST(ec_allreduce(comm, NULL, NULL, 0, EC_FLOAT32, EC_SUM, EC_TIMEOUT_DEFAULT));
}

static void check_broadcast_allgather_barrier(ec_comm* comm, int rank, int size) {
  enum { N = 300 };
  for (int root = 0; root < size; ++root) {
    int64_t buf[N];
    for (int i = 0; i < N; ++i) buf[i] = rank == root ? root * 100000 + i : -1;
    if (root % 2) {
      MUST(ec_broadcast_on_stream(comm, buf, N, EC_INT64, root, NULL, 60000));
    } else {
      MUST(ec_broadcast(comm, buf, N, EC_INT64, root, EC_TIMEOUT_DEFAULT));
    }
    int wrong = 0;
    for (int i = 0; i < N; ++i) wrong += buf[i] != root * 100000 + i;
    if (wrong) fail("broadcast from %d: %d of %d elements wrong", root, wrong, N);
  }
  float send[N];
  float* recv = malloc(sizeof(float) * N * (size_t)size);
  for (int i = 0; i < N; ++i) send[i] = (float)(rank * N + i);
  MUST(ec_allgather(comm, send, recv, N, EC_FLOAT32, EC_TIMEOUT_DEFAULT));
  int wrong = 0;
  for (int i = 0; i < N * size; ++i) wrong += recv[i] != (float)i;
  if (wrong) fail("allgather: %d of %d elements wrong", wrong, N * size);
  /* In place: this rank's part already sits at its place in recv. */
  for (int i = 0; i < N * size; ++i) recv[i] = i / N == rank ? (float)(2 * i) : -1.0f;
  MUST(ec_allgather_on_stream(comm, recv + (size_t)rank * N, recv, N, EC_FLOAT32, NULL, 60000));
  wrong = 0;
  for (int i = 0; i < N * size; ++i) wrong += recv[i] != (float)(2 * i);
  if (wrong) fail("allgather in place: %d of %d elements wrong", wrong, N * size);
  free(recv);
  MUST(ec_barrier(comm, EC_TIMEOUT_DEFAULT));
  MUST(ec_barrier(comm, 60000));
  /* One rule for every timeout: EC_WAIT_FOREVER, its old alias -1, and limits too long for the
   * clock wait without limit. */
  MUST(ec_barrier(comm, EC_WAIT_FOREVER));
  MUST(ec_barrier(comm, EC_TIMEOUT_INFINITE));
  MUST(ec_barrier(comm, INT64_MAX / 2));
}

/* ---- partial allreduce ---- */

enum { PN = 257, STEPS = 40 };

struct Collected {
  double sum[PN];
  uint64_t next_round; /* rounds must come in order, without gaps */
  int rounds;
  int size;
};

static void take(struct Collected* c, const float* data, const ec_round_info* info) {
  if (info->round != c->next_round) {
    fail("partial: round %llu handed back, expected %llu", (unsigned long long)info->round,
         (unsigned long long)c->next_round);
  }
  if (info->fresh_count < 0 || info->fresh_count > c->size || info->contributors > c->size) {
    fail("partial: round %llu: fresh %d contributors %d of %d ranks",
         (unsigned long long)info->round, info->fresh_count, info->contributors, c->size);
  }
  c->next_round = info->round + 1;
  ++c->rounds;
  for (int i = 0; i < PN; ++i) c->sum[i] += data[i];
}

static void on_flush_round(const void* data, size_t count, const ec_round_info* info, void* user) {
  if (count != PN) fail("flush callback: count %zu, want %d", count, PN);
  take((struct Collected*)user, (const float*)data, info);
}

static float post_value(int rank, int step, int i) {
  return (float)((rank + 1) * (step + 1) + i % 4);
}

static void check_partial(ec_comm* comm, int rank, int size, ec_partial_mode mode,
                          uint32_t deadline_us) {
  ec_partial_options opts;
  ec_partial_options_init(&opts);
  if (opts.deadline_us != 0) fail("ec_partial_options_init left deadline_us non-zero");
  opts.mode = mode;
  opts.deadline_us = deadline_us;
  opts.seed = 7;
  ec_partial* pa = NULL;
  MUST(ec_partial_create(comm, PN, EC_FLOAT32, &opts, &pa));
  static struct Collected c;
  memset(&c, 0, sizeof(c));
  c.size = size;
  float grad[PN], result[PN];
  for (int step = 0; step < STEPS; ++step) {
    for (int i = 0; i < PN; ++i) grad[i] = post_value(rank, step, i);
    if (rank == step % size) { /* some imbalance: a different slow rank each step */
      const struct timespec ms2 = {0, 2000000};
      nanosleep(&ms2, NULL);
    }
    if (step % 2) {
      MUST(ec_partial_post_on_stream(pa, grad, PN, EC_FLOAT32, (void*)0x1234));
    } else {
      MUST(ec_partial_post(pa, grad, PN, EC_FLOAT32));
    }
    int took = 0;
    for (;;) {
      ec_round_info info;
      const ec_status s = ec_partial_poll(pa, result, PN, &info);
      if (s == EC_IN_PROGRESS) {
        if (ec_last_error()[0] != '\0') fail("poll: EC_IN_PROGRESS left a message");
        break;
      }
      MUST(s);
      take(&c, result, &info);
      took = 1;
    }
    if (!took) {
      ec_round_info info;
      const int64_t timeouts[3] = {60000, EC_TIMEOUT_DEFAULT, EC_WAIT_FOREVER};
      MUST(ec_partial_wait(pa, result, PN, &info, timeouts[step % 3]));
      take(&c, result, &info);
    }
  }
  uint64_t flush_round = 0;
  MUST(ec_partial_flush(pa, on_flush_round, &c, &flush_round));
  if (c.next_round != flush_round + 1) {
    fail("partial: flush round %llu but the last round taken is %llu",
         (unsigned long long)flush_round, (unsigned long long)c.next_round - 1);
  }
  /* Conservation: the rounds every rank received add up to every rank's posts. */
  int wrong = 0;
  for (int i = 0; i < PN; ++i) {
    double want = 0;
    for (int r = 0; r < size; ++r) {
      for (int step = 0; step < STEPS; ++step) want += post_value(r, step, i);
    }
    wrong += c.sum[i] != want;
  }
  if (wrong) fail("partial mode %d: %d of %d sums differ from the sum of posts", mode, wrong, PN);
  /* Straggler attribution: every rank's figures count every round taken once. */
  for (int r = 0; r < size; ++r) {
    ec_rank_lateness l;
    MUST(ec_partial_lateness(pa, r, &l));
    if (l.rounds != c.next_round || l.posts != STEPS || l.fresh > l.posts || l.absent > l.rounds ||
        l.max_age < 0) {
      fail(
          "partial mode %d: rank %d's lateness: %llu rounds (%llu taken), %llu posts (%d made), "
          "%llu fresh, %llu absent",
          mode, r, (unsigned long long)l.rounds, (unsigned long long)c.next_round,
          (unsigned long long)l.posts, STEPS, (unsigned long long)l.fresh,
          (unsigned long long)l.absent);
    }
  }
  ec_rank_lateness none;
  expect_error("lateness of a rank out of range", ec_partial_lateness(pa, size, &none),
               EC_INVALID_ARGUMENT, "ec_partial_lateness", "not in 0 ..");
  expect_error("lateness into null", ec_partial_lateness(pa, 0, NULL), EC_INVALID_ARGUMENT,
               "ec_partial_lateness", "null output");

  /* Bad input on a live object: local checks, no round is lost. */
  expect_error("partial post with the wrong count", ec_partial_post(pa, grad, PN - 1, EC_FLOAT32),
               EC_INVALID_ARGUMENT, "ec_partial_post", "256");
  expect_error("partial post with the wrong dtype", ec_partial_post(pa, grad, PN, EC_FLOAT64),
               EC_INVALID_ARGUMENT, "ec_partial_post", "f64");
  expect_error("partial post with dtype 9", ec_partial_post(pa, grad, PN, (ec_dtype)9),
               EC_INVALID_ARGUMENT, "ec_partial_post", "dtype 9");
  expect_error("partial post of null", ec_partial_post(pa, NULL, PN, EC_FLOAT32),
               EC_INVALID_ARGUMENT, "ec_partial_post", "null");
  expect_error("partial poll into the wrong count", ec_partial_poll(pa, result, 3, NULL),
               EC_INVALID_ARGUMENT, "ec_partial_poll", "3 elements");
  expect_error("partial wait into null", ec_partial_wait(pa, NULL, PN, NULL, 1000),
               EC_INVALID_ARGUMENT, "ec_partial_wait", "null result");
  expect_error("partial wait with timeout -2", ec_partial_wait(pa, result, PN, NULL, -2),
               EC_INVALID_ARGUMENT, "ec_partial_wait", "timeout_ms -2");

  MUST(ec_barrier(comm, EC_TIMEOUT_DEFAULT)); /* everyone is past flush */
  MUST(ec_partial_destroy(pa));
  MUST(ec_partial_destroy(pa)); /* idempotent */
  expect_error("partial post after destroy", ec_partial_post(pa, grad, PN, EC_FLOAT32), EC_ABORTED,
               "ec_partial_post", "destroy");
  expect_error("partial poll after destroy", ec_partial_poll(pa, result, PN, NULL), EC_ABORTED,
               "ec_partial_poll", "destroy");
  expect_error("partial flush after destroy", ec_partial_flush(pa, NULL, NULL, NULL), EC_ABORTED,
               "ec_partial_flush", "destroy");
  ec_partial_free(pa);
}

/* ---- bad input ---- */

static void check_bad_input(ec_comm* comm, int rank, int size) {
  float buf[8] = {0};
  expect_error("allreduce on a null handle", ec_allreduce(NULL, buf, buf, 8, EC_FLOAT32, EC_SUM, 0),
               EC_INVALID_ARGUMENT, "ec_allreduce", "null ec_comm");
  expect_error("barrier on a null handle", ec_barrier(NULL, 0), EC_INVALID_ARGUMENT, "ec_barrier",
               "null ec_comm");
  int out = 0;
  expect_error("rank of a null handle", ec_comm_rank(NULL, &out), EC_INVALID_ARGUMENT,
               "ec_comm_rank", "null ec_comm");
  expect_error("rank into null", ec_comm_rank(comm, NULL), EC_INVALID_ARGUMENT, "ec_comm_rank",
               "null output");
  expect_error("allreduce with dtype 6", ec_allreduce(comm, buf, buf, 8, (ec_dtype)6, EC_SUM, 0),
               EC_INVALID_ARGUMENT, "ec_allreduce", "dtype 6 is not an ec_dtype");
  expect_error("allreduce with dtype -1", ec_allreduce(comm, buf, buf, 8, (ec_dtype)-1, EC_SUM, 0),
               EC_INVALID_ARGUMENT, "ec_allreduce", "dtype -1");
  expect_error("allreduce with op 3", ec_allreduce(comm, buf, buf, 8, EC_FLOAT32, (ec_op)3, 0),
               EC_INVALID_ARGUMENT, "ec_allreduce", "op 3 is not an ec_op");
  expect_error("broadcast with dtype 100", ec_broadcast(comm, buf, 8, (ec_dtype)100, 0, 0),
               EC_INVALID_ARGUMENT, "ec_broadcast", "dtype 100");
  expect_error("allgather with dtype 7", ec_allgather(comm, buf, buf, 1, (ec_dtype)7, 0),
               EC_INVALID_ARGUMENT, "ec_allgather", "dtype 7");
  expect_error("barrier with timeout -3", ec_barrier(comm, -3), EC_INVALID_ARGUMENT, "ec_barrier",
               "timeout_ms -3");
  expect_error("barrier with timeout INT64_MIN", ec_barrier(comm, INT64_MIN), EC_INVALID_ARGUMENT,
               "ec_barrier", "EC_WAIT_FOREVER");
  ec_partial* pa = (ec_partial*)buf;
  expect_error("partial create into null", ec_partial_create(comm, 8, EC_FLOAT32, NULL, NULL),
               EC_INVALID_ARGUMENT, "ec_partial_create", "null output");
  expect_error("partial create on a null handle", ec_partial_create(NULL, 8, EC_FLOAT32, NULL, &pa),
               EC_INVALID_ARGUMENT, "ec_partial_create", "null ec_comm");
  if (pa != NULL) fail("a failed ec_partial_create left *out non-null");
  expect_error("partial create with dtype 8", ec_partial_create(comm, 8, (ec_dtype)8, NULL, &pa),
               EC_INVALID_ARGUMENT, "ec_partial_create", "dtype 8");
  ec_partial_options opts;
  ec_partial_options_init(&opts);
  opts.mode = (ec_partial_mode)9;
  expect_error("partial create with mode 9", ec_partial_create(comm, 8, EC_FLOAT32, &opts, &pa),
               EC_INVALID_ARGUMENT, "ec_partial_create", "mode 9");
  opts.mode = EC_PARTIAL_DEADLINE;
  opts.deadline_us = 4000000000u;
  expect_error("partial create with a deadline over 1 h",
               ec_partial_create(comm, 8, EC_FLOAT32, &opts, &pa), EC_INVALID_ARGUMENT,
               "ec_partial_create", "deadline of 4000000000 us");
  expect_error("partial post on a null handle", ec_partial_post(NULL, buf, 8, EC_FLOAT32),
               EC_INVALID_ARGUMENT, "ec_partial_post", "null ec_partial");
  /* A communicator handle where a partial allreduce is expected. */
  expect_error("partial post on a communicator handle",
               ec_partial_post((ec_partial*)comm, buf, 8, EC_FLOAT32), EC_INVALID_ARGUMENT,
               "ec_partial_post", "not a live ec_partial");
  ec_comm* other = (ec_comm*)buf;
  expect_error("from_store with rank >= size",
               ec_comm_from_store("127.0.0.1", 1234, NULL, size, size, 0, &other),
               EC_INVALID_ARGUMENT, "ec_comm_from_store", "rank");
  if (other != NULL) fail("a failed ec_comm_from_store left *out non-null");
  expect_error("from_store with port 0 and no server",
               ec_comm_from_store("127.0.0.1", 0, NULL, 0, 2, 0, &other), EC_INVALID_ARGUMENT,
               "ec_comm_from_store", "port 0");
  expect_error("from_store with a null host", ec_comm_from_store(NULL, 1234, NULL, 0, 2, 0, &other),
               EC_INVALID_ARGUMENT, "ec_comm_from_store", "host");
  expect_error("from_env into null", ec_comm_from_env(NULL), EC_INVALID_ARGUMENT,
               "ec_comm_from_env", "null output");
  /* A null buffer is found by the C++ precheck: collective, so every rank learns it. */
  float* p = rank == size - 1 ? NULL : buf;
  expect_error("allreduce with a null buffer on the last rank",
               ec_allreduce(comm, p, p, 8, EC_FLOAT32, EC_SUM, EC_TIMEOUT_DEFAULT),
               EC_INVALID_ARGUMENT, "ec_allreduce", "null buffer");
  /* A root that does not exist, on every rank. */
  expect_error("broadcast from root = size", ec_broadcast(comm, buf, 8, EC_FLOAT32, size, 60000),
               EC_INVALID_ARGUMENT, "ec_broadcast", "root");
  MUST(ec_barrier(comm, EC_TIMEOUT_DEFAULT)); /* still usable */
}

/* ---- a second communicator, joined by store address (rank 0 serves it) ---- */

static int free_port(void) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a;
  memset(&a, 0, sizeof(a));
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  if (fd < 0 || bind(fd, (struct sockaddr*)&a, sizeof(a)) != 0 ||
      getsockname(fd, (struct sockaddr*)&a, &len) != 0) {
    perror("free_port");
    exit(1);
  }
  close(fd);
  return ntohs(a.sin_port);
}

static void check_from_store(ec_comm* world, int rank, int size) {
  int32_t port = rank == 0 ? free_port() : 0;
  MUST(ec_broadcast(world, &port, 1, EC_INT32, 0, EC_TIMEOUT_DEFAULT));
  ec_comm* comm = NULL;
  MUST(ec_comm_from_store("127.0.0.1", port, "capi-test-token", rank, size, rank == 0, &comm));
  int r = -1, n = -1;
  MUST(ec_comm_rank(comm, &r));
  MUST(ec_comm_size(comm, &n));
  if (r != rank || n != size) fail("from_store: rank %d of %d, want %d of %d", r, n, rank, size);
  int64_t v = rank + 1;
  MUST(ec_allreduce(comm, &v, &v, 1, EC_INT64, EC_SUM, 60000));
  if (v != (int64_t)size * (size + 1) / 2) fail("from_store: allreduce gave %lld", (long long)v);
  MUST(ec_barrier(comm, EC_TIMEOUT_DEFAULT));
  MUST(ec_comm_destroy(comm));
  MUST(ec_comm_destroy(comm)); /* idempotent */
  /* Every later call fails with EC_ABORTED and says why; the handle still answers. */
  expect_error("allreduce after destroy", ec_allreduce(comm, &v, &v, 1, EC_INT64, EC_SUM, 0),
               EC_ABORTED, "ec_allreduce", "destroyed");
  expect_error("broadcast after destroy", ec_broadcast(comm, &v, 1, EC_INT64, 0, 1000), EC_ABORTED,
               "ec_broadcast", "destroyed");
  expect_error("barrier after destroy", ec_barrier(comm, EC_TIMEOUT_INFINITE), EC_ABORTED,
               "ec_barrier", "destroyed");
  ec_partial* pa = NULL;
  expect_error("partial create after destroy", ec_partial_create(comm, 4, EC_FLOAT32, NULL, &pa),
               EC_ABORTED, "ec_partial_create", "destroyed");
  MUST(ec_comm_rank(comm, &r));
  ec_comm_free(comm);
  MUST(ec_barrier(world, EC_TIMEOUT_DEFAULT));
}

/* ec_comm_shrink with nobody gone: every rank stays, numbered as before, and the rebuilt
 * communicator works. (Shrinking after a death: tests/system/continue_test.sh, shrink_test.) */
static void check_shrink(ec_comm* comm, int rank, int size) {
  expect_error("shrink into a null buffer of capacity 3", ec_comm_shrink(comm, 0, NULL, 3, NULL),
               EC_INVALID_ARGUMENT, "ec_comm_shrink", "members buffer null");
  int members[8] = {-1, -1, -1, -1, -1, -1, -1, -1};
  int count = -1;
  MUST(ec_comm_shrink(comm, EC_TIMEOUT_DEFAULT, members, 8, &count));
  if (count != size) fail("shrink with nobody gone: %d members of %d", count, size);
  for (int i = 0; i < count && i < 8; ++i) {
    if (members[i] != i) fail("shrink with nobody gone: member %d was rank %d", i, members[i]);
  }
  int r = -1, n = -1;
  MUST(ec_comm_rank(comm, &r));
  MUST(ec_comm_size(comm, &n));
  if (r != rank || n != size) fail("after shrink: rank %d of %d, was %d of %d", r, n, rank, size);
  check_allreduce(comm, rank, size);
}

int main(void) {
  if (ec_abi_version() != EAGERCOMM_ABI_VERSION) {
    fprintf(stderr, "ABI version %d, header %d\n", ec_abi_version(), EAGERCOMM_ABI_VERSION);
    return 1;
  }
  if (strcmp(ec_status_name(EC_TIMEOUT), "timeout") != 0 ||
      strcmp(ec_status_name((ec_status)99), "unknown status") != 0) {
    fprintf(stderr, "ec_status_name is wrong\n");
    return 1;
  }
  if (ec_dtype_size(EC_BFLOAT16) != 2 || ec_dtype_size(EC_INT64) != 8 ||
      ec_dtype_size((ec_dtype)6) != 0) {
    fprintf(stderr, "ec_dtype_size is wrong\n");
    return 1;
  }
  ec_comm* comm = NULL;
  MUST(ec_comm_from_env(&comm));
  int rank = -1, size = -1;
  MUST(ec_comm_rank(comm, &rank));
  MUST(ec_comm_size(comm, &size));
  g_rank = rank;

  check_allreduce(comm, rank, size);
  check_broadcast_allgather_barrier(comm, rank, size);
  check_bad_input(comm, rank, size);
  check_partial(comm, rank, size, EC_PARTIAL_SOLO, 0);
  check_partial(comm, rank, size, EC_PARTIAL_MAJORITY, 0);
  check_partial(comm, rank, size, EC_PARTIAL_SYNC, 0);
  check_partial(comm, rank, size, EC_PARTIAL_DEADLINE, 1000);
  check_partial(comm, rank, size, EC_PARTIAL_DEADLINE, 0);
  check_partial(comm, rank, size,
                (ec_partial_mode)(EC_PARTIAL_SOLO | EC_PARTIAL_CONTINUE_ON_FAILURE), 0);
  check_shrink(comm, rank, size);
  check_from_store(comm, rank, size);

  /* Abort, then destroy: every later call fails with EC_ABORTED carrying the reason. */
  MUST(ec_barrier(comm, EC_TIMEOUT_DEFAULT));
  MUST(ec_comm_abort(comm, "capi_test is done"));
  MUST(ec_comm_abort(comm, NULL)); /* idempotent */
  float x = 1;
  expect_error("allreduce after abort", ec_allreduce(comm, &x, &x, 1, EC_FLOAT32, EC_SUM, 0),
               EC_ABORTED, "ec_allreduce", "capi_test is done");
  expect_error("barrier after abort", ec_barrier(comm, 1000), EC_ABORTED, "ec_barrier",
               "capi_test is done");
  MUST(ec_comm_destroy(comm));
  expect_error("allgather after abort and destroy",
               ec_allgather(comm, &x, &x, 1, EC_FLOAT32, EC_TIMEOUT_INFINITE), EC_ABORTED,
               "ec_allgather", "capi_test is done");
  ec_comm_free(comm);
  ec_comm_free(NULL);

  if (g_failures) {
    fprintf(stderr, "rank %d: %d checks failed\n", rank, g_failures);
    return 1;
  }
  printf("rank %d of %d: capi_test passed\n", rank, size);
  return 0;
}
