/* eagercomm's C API: communicators, blocking collectives and partial allreduce (eager-SGD)
 * for programs and language bindings that cannot use the C++ API.
 *
 * Installed as <eagercomm/eagercomm.h>; link with -leagercomm (pkg-config eagercomm, or the
 * CMake target eagercomm::eagercomm). C11 and C++; no C++ types cross this interface.
 *
 *   ec_comm* comm = NULL;
 *   if (ec_comm_from_env(&comm) != EC_OK) { fprintf(stderr, "%s\n", ec_last_error()); ... }
 *   ec_allreduce(comm, grad, grad, n, EC_FLOAT32, EC_SUM, EC_TIMEOUT_DEFAULT);   in place
 *   ec_comm_destroy(comm);    leaves the job (ec_comm_abort(comm, "why"): from any thread)
 *   ec_comm_free(comm);       releases the handle
 *
 * Errors: every function that can fail returns an ec_status (EC_OK on success) and records a
 * message for the calling thread, read with ec_last_error(): "invalid argument: ec_allreduce:
 * op 7 is not an ec_op (EC_SUM, EC_MIN, EC_MAX)". A null handle, a null buffer with a non-zero
 * count, an enum value out of range and a count that does not match are EC_INVALID_ARGUMENT;
 * calls on a communicator or partial allreduce after its destroy (or abort) are EC_ABORTED.
 *
 * Rules, as in the C++ API (collectives/communicator.h): every rank calls the same collectives
 * in the same order with matching arguments (otherwise every rank gets EC_MISMATCH and no
 * buffer is written with wrong data); collectives are called from one thread per communicator
 * (or threads that order their calls); abort may be called from any thread.
 *
 * Lifetime: destroy leaves the job but keeps the handle, so later calls fail cleanly with
 * EC_ABORTED; free releases the handle (destroying first when that has not been done). A freed
 * handle must not be used again (a freed handle is recognised on a best-effort basis only).
 *
 * ABI: EAGERCOMM_ABI_VERSION changes whenever a declaration here changes incompatibly; the
 * library's SOVERSION is 0 for the whole 0.x series, so check ec_abi_version() at start-up
 * when a program may meet a library other than the one it was built against. */
#ifndef EAGERCOMM_EAGERCOMM_H_
#define EAGERCOMM_EAGERCOMM_H_

#include <stddef.h>
#include <stdint.h>

#define EAGERCOMM_ABI_VERSION 1

#if defined(__GNUC__)
#define EC_API __attribute__((visibility("default")))
#else
#define EC_API
#endif

/* Enums cross the API as ints. In C++ they get int as their fixed underlying type, so that a
 * caller's out-of-range value (checked and refused with EC_INVALID_ARGUMENT) is still a valid
 * value of the type on the library's side; in C the type is int-sized either way. */
#ifdef __cplusplus
#define EC_ENUM(name) enum name : int
#else
#define EC_ENUM(name) enum name
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---- errors ---- */

/* The values of eagercomm::StatusCode (runtime/status.h), one for one. */
typedef EC_ENUM(ec_status){
    EC_OK = 0,
    EC_IN_PROGRESS = 1,      /* not an error: ec_partial_poll found no completed round yet */
    EC_INVALID_ARGUMENT = 2, /* null handle or buffer, enum out of range, wrong count, ... */
    EC_MISMATCH = 3,         /* ranks disagree on a collective's arguments */
    EC_TIMEOUT = 4,          /* a blocking call ran past its timeout (see "Timeouts") */
    EC_PEER_FAILED = 5,      /* a peer is gone: destroyed, dead or unreachable */
    EC_ABORTED = 6,          /* the communicator or partial allreduce was destroyed or aborted */
    EC_UNAVAILABLE = 7,      /* a transport, device or package is not available here */
    EC_NOT_SUPPORTED = 8,    /* valid, but this build or backend does not do it */
    EC_NO_MEMORY = 9,
    EC_BUSY = 10,
    EC_PROTOCOL_ERROR = 11, /* a peer sent something malformed */
    EC_IO_ERROR = 12,       /* a system call failed */
    EC_INTERNAL = 13        /* a bug in eagercomm */
} ec_status;

/* The message of the last ec_* call made by this thread: "" when it succeeded, otherwise
 * "<code name>: <what was wrong>". Valid until this thread's next ec_* call. Never null. */
EC_API const char* ec_last_error(void);

/* "ok", "invalid argument", ...; "unknown status" for a value that is not an ec_status. */
EC_API const char* ec_status_name(ec_status status);

/* EAGERCOMM_ABI_VERSION of the library that is loaded. */
EC_API int ec_abi_version(void);

/* ---- element types and operators (eagercomm::DataType, eagercomm::ReduceOp) ---- */

typedef EC_ENUM(ec_dtype){
    EC_FLOAT32 = 0,  EC_FLOAT64 = 1, EC_FLOAT16 = 2, /* IEEE binary16, as uint16_t bits */
    EC_BFLOAT16 = 3, EC_INT32 = 4,   EC_INT64 = 5} ec_dtype;

typedef EC_ENUM(ec_op){EC_SUM = 0, EC_MIN = 1, EC_MAX = 2} ec_op;

/* Bytes of one element; 0 for a value that is not an ec_dtype. */
EC_API size_t ec_dtype_size(ec_dtype dtype);

/* ---- communicators ---- */

typedef struct ec_comm ec_comm;

/* Joins the job this process was started in (eagercomm-run, mpirun with
 * EAGERCOMM_MASTER_ADDR, srun, torchrun: see runtime/launch_env.h); the rank that serves the
 * bootstrap store there starts it itself. Blocks until every rank has joined or
 * EAGERCOMM_TIMEOUT passes. On success *out is a new handle; on failure *out is NULL. */
EC_API ec_status ec_comm_from_env(ec_comm** out);

/* Joins a group of `size` ranks as `rank` through the eagercomm bootstrap store (TcpStore)
 * listening on host:port, presenting `token` (NULL or "": none; every rank passes the same).
 * Exactly one process of the job must serve the store: that one passes serve_store = 1 and
 * starts a store server on `port` of every interface before connecting (usually rank 0, with
 * `host` its own address or "127.0.0.1"); the others pass 0 and wait for it to come up, up to
 * EAGERCOMM_TIMEOUT. A store an outside launcher serves (eagercomm-run's) is joined with
 * serve_store = 0 everywhere. The job id (shared-memory names) is EAGERCOMM_JOB_ID, else
 * derived from host:port. Other settings come from the EAGERCOMM_* variables. */
EC_API ec_status ec_comm_from_store(const char* host, int port, const char* token, int rank,
                                    int size, int serve_store, ec_comm** out);

EC_API ec_status ec_comm_rank(const ec_comm* comm, int* rank);
EC_API ec_status ec_comm_size(const ec_comm* comm, int* size);

/* Leaves the job: pending collectives fail with EC_ABORTED, peers' collectives that need this
 * rank fail with EC_PEER_FAILED, and later calls on `comm` return EC_ABORTED. Waits for peers
 * that may still write into this rank's buffers. Idempotent. The handle stays valid. */
EC_API ec_status ec_comm_destroy(ec_comm* comm);

/* ec_comm_destroy from any thread, for a reason (NULL or "": none given), also while another
 * thread is blocked in a call on `comm`: that call returns at once with EC_ABORTED carrying
 * `reason`, later calls fail the same way, and the peers' operations in flight fail with
 * EC_PEER_FAILED quoting it. For watchdogs and shutdown paths (not async-signal-safe).
 * Idempotent. The handle stays valid; free it afterwards. */
EC_API ec_status ec_comm_abort(ec_comm* comm, const char* reason);

/* Collective over the ranks still alive, after a call failed with EC_PEER_FAILED: they agree
 * on who is left and `comm` is rebuilt over them in place (its rank and size change; see
 * Communicator::shrink in communicator.h). `members` (may be NULL) receives up to `capacity` of
 * the members' former ranks, in their new order, and *count (may be NULL) their number. A rank
 * that was left out gets EC_PEER_FAILED. timeout_ms as for collectives. */
EC_API ec_status ec_comm_shrink(ec_comm* comm, int64_t timeout_ms, int* members, int capacity,
                                int* count);

/* Destroys `comm` if that has not been done and releases the handle. NULL is a no-op.
 * Partial allreduces made on it must be freed first or afterwards; they fail with EC_ABORTED
 * once it is gone. */
EC_API void ec_comm_free(ec_comm* comm);

/* ---- blocking collectives ----
 *
 * Timeouts (the same rule as the C++ API's kConfiguredTimeout / kWaitForever and the Python
 * module's None / WAIT_FOREVER), in milliseconds:
 *   EC_TIMEOUT_DEFAULT (0)         EAGERCOMM_TIMEOUT (300 s unless set)
 *   EC_WAIT_FOREVER (INT64_MAX)    no limit
 *   a positive number              that limit (one too long for the clock: no limit)
 *   EC_TIMEOUT_INFINITE (-1)       an alias of EC_WAIT_FOREVER, kept for programs built with it
 *   any other negative number      EC_INVALID_ARGUMENT
 * A collective that times out is abandoned on every rank (the peers' calls fail with this rank's
 * report instead of waiting for it) and its buffers are free to reuse at once; the message names
 * the ranks that had not started it and those that went silent. */
#define EC_TIMEOUT_DEFAULT 0
#define EC_WAIT_FOREVER INT64_MAX
#define EC_TIMEOUT_INFINITE (-1)

/* recv = op over ranks of send, elementwise; `count` elements each. send == recv: in place. */
EC_API ec_status ec_allreduce(ec_comm* comm, const void* send, void* recv, size_t count,
                              ec_dtype dtype, ec_op op, int64_t timeout_ms);

/* buf on every rank = buf on `root`. */
EC_API ec_status ec_broadcast(ec_comm* comm, void* buf, size_t count, ec_dtype dtype, int root,
                              int64_t timeout_ms);

/* recv (size * count elements) = every rank's send (count elements) in rank order.
 * send == recv + rank * count elements: in place. */
EC_API ec_status ec_allgather(ec_comm* comm, const void* send, void* recv, size_t count,
                              ec_dtype dtype, int64_t timeout_ms);

EC_API ec_status ec_barrier(ec_comm* comm, int64_t timeout_ms);

/* ---- CUDA device buffers ----
 *
 * Any buffer of ec_allreduce, ec_broadcast, ec_allgather and ec_partial_post may be CUDA device
 * memory (detected per call; refused with EC_UNAVAILABLE where this process cannot use CUDA).
 * The _on_stream forms take the cudaStream_t the call is ordered on, as NCCL does: the call
 * reads its device inputs after the work enqueued on `cuda_stream` before it, and its results
 * are complete when it returns. NULL, and the forms without a stream, mean the legacy default
 * stream (which does not wait for the application's non-blocking streams). `cuda_stream` is
 * ignored when every buffer is host memory. */
EC_API ec_status ec_allreduce_on_stream(ec_comm* comm, const void* send, void* recv, size_t count,
                                        ec_dtype dtype, ec_op op, void* cuda_stream,
                                        int64_t timeout_ms);
EC_API ec_status ec_broadcast_on_stream(ec_comm* comm, void* buf, size_t count, ec_dtype dtype,
                                        int root, void* cuda_stream, int64_t timeout_ms);
EC_API ec_status ec_allgather_on_stream(ec_comm* comm, const void* send, void* recv, size_t count,
                                        ec_dtype dtype, void* cuda_stream, int64_t timeout_ms);

/* ---- partial allreduce (collectives/partial_allreduce.h explains rounds, modes, late
 * posts, back-pressure and flush) ---- */

typedef struct ec_partial ec_partial;

typedef EC_ENUM(ec_partial_mode){
    EC_PARTIAL_SYNC = 0,     EC_PARTIAL_SOLO = 1,
    EC_PARTIAL_MAJORITY = 2, EC_PARTIAL_QUORUM = 3, /* ec_partial_options.quorum ranks fresh */
    EC_PARTIAL_ADAPTIVE = 4, /* sync, or solo while measured compute times promise 1.3x per epoch */
    EC_PARTIAL_DEADLINE = 5  /* every rank, or ec_partial_options.deadline_us after the first */
} ec_partial_mode;

/* OR'd into ec_partial_options.mode (mode = EC_PARTIAL_SOLO | EC_PARTIAL_CONTINUE_ON_FAILURE):
 * when a rank dies or is declared hung, the survivors shrink the communicator (ec_comm_shrink)
 * and the object goes on over them (C++: OnFailure::kContinue, partial_allreduce.h). The
 * communicator must outlive the object; every rank must pass the flag alike. */
#define EC_PARTIAL_CONTINUE_ON_FAILURE 0x100

typedef EC_ENUM(ec_late_policy){EC_LATE_CARRY = 0, EC_LATE_DROP = 1} ec_late_policy;

typedef struct ec_partial_options {
  ec_partial_mode mode;  /* EC_PARTIAL_SOLO */
  int quorum;            /* k for EC_PARTIAL_QUORUM (1 .. size); 0 otherwise */
  ec_late_policy late;   /* EC_LATE_CARRY */
  uint32_t sync_every;   /* every N-th round synchronous; 0: never */
  uint64_t seed;         /* shared PRNG seed (majority initiators) */
  uint32_t result_depth; /* completed rounds a rank may hold unconsumed (1 .. 1024); 4 */
  uint32_t deadline_us;  /* T for EC_PARTIAL_DEADLINE (1 .. 3600000000 us); 0: auto (from the
                            arrival spread). In what was padding: the struct's size is unchanged */
} ec_partial_options;

/* Fills `options` with the defaults above (solo, carry, result depth 4). */
EC_API void ec_partial_options_init(ec_partial_options* options);

/* What one completed round was made of. */
typedef struct ec_round_info {
  uint64_t round;   /* the round's number: 0, 1, 2, ... on every rank */
  int fresh_count;  /* ranks whose contribution held a post meant for this round */
  int contributors; /* ranks that contributed any data (fresh or carried) */
  int max_age;      /* the oldest carried post's age in rounds (0: all fresh or empty) */
} ec_round_info;

/* Collective (every rank of `comm`, same order, same arguments): a partial allreduce over
 * buffers of `count` elements of `dtype`. options NULL: the defaults. */
EC_API ec_status ec_partial_create(ec_comm* comm, size_t count, ec_dtype dtype,
                                   const ec_partial_options* options, ec_partial** out);

/* Adds `gradient` (count elements of dtype, as created) to this rank's open contribution.
 * Never waits for other ranks. */
EC_API ec_status ec_partial_post(ec_partial* pa, const void* gradient, size_t count,
                                 ec_dtype dtype);
/* As ec_partial_post, a device `gradient` read after the work enqueued on `cuda_stream` (see
 * "CUDA device buffers" above). */
EC_API ec_status ec_partial_post_on_stream(ec_partial* pa, const void* gradient, size_t count,
                                           ec_dtype dtype, void* cuda_stream);

/* The next completed round: its sum copied into `result` (count elements, as created) and its
 * description into *info (may be NULL). EC_IN_PROGRESS when no round has completed yet (result
 * untouched); after a failure, the error once every round before it has been handed back. */
EC_API ec_status ec_partial_poll(ec_partial* pa, void* result, size_t count, ec_round_info* info);

/* As ec_partial_poll, waiting for the next round up to timeout_ms (EC_TIMEOUT_DEFAULT,
 * EC_WAIT_FOREVER or milliseconds, as for collectives). EC_TIMEOUT only ends the wait:
 * rounds keep running and the object stays usable. */
EC_API ec_status ec_partial_wait(ec_partial* pa, void* result, size_t count, ec_round_info* info,
                                 int64_t timeout_ms);

/* Receives one round during ec_partial_flush: `data` (count elements of the object's dtype)
 * is valid only during the call. */
typedef void (*ec_round_fn)(const void* data, size_t count, const ec_round_info* info,
                            void* user_data);

/* Collective: drains every carried contribution; every round until the flush round goes to
 * fn(data, count, info, user_data) on this thread (fn NULL: they are discarded). Afterwards
 * the results received (poll, wait, flush) add up to every rank's posts. *flush_round (may
 * be NULL) receives the flush round's number. */
EC_API ec_status ec_partial_flush(ec_partial* pa, ec_round_fn fn, void* user_data,
                                  uint64_t* flush_round);

/* Straggler attribution: how often and how late rank `rank`'s contributions were, over the
 * rounds this rank has taken (the same on every rank; collectives/partial_allreduce.h,
 * RankLateness). */
typedef struct ec_rank_lateness {
  uint64_t rounds;      /* rounds taken */
  uint64_t posts;       /* its posts those rounds summed */
  uint64_t fresh;       /* rounds whose contribution from it held a post meant for the round */
  uint64_t late;        /* rounds in which it contributed posts carried from earlier rounds */
  uint64_t absent;      /* rounds it contributed nothing to */
  uint64_t late_rounds; /* how many rounds late its oldest carried post was, summed */
  int max_age;          /* the latest of them, in rounds */
  double late_seconds;  /* late_rounds x the mean time between rounds here (an estimate) */
} ec_rank_lateness;

/* Fills *out with rank `rank`'s figures (0 <= rank < the communicator's size). */
EC_API ec_status ec_partial_lateness(ec_partial* pa, int rank, ec_rank_lateness* out);

/* Stops taking part: rounds in flight fail here, peers' later rounds fail with
 * EC_PEER_FAILED, later calls on `pa` return EC_ABORTED. Idempotent; the handle stays valid. */
EC_API ec_status ec_partial_destroy(ec_partial* pa);

/* Destroys `pa` if needed and releases the handle. NULL is a no-op. */
EC_API void ec_partial_free(ec_partial* pa);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* EAGERCOMM_EAGERCOMM_H_ */
