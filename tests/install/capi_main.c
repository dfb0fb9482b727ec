/* Uses an installed eagercomm through its C API (<eagercomm/eagercomm.h>), as a rank of a job
 * started by the installed eagercomm-run: an allreduce of rank + 1 and a solo partial
 * allreduce round, checked against their known results. Prints "OK ..." on every rank. */
#include <eagercomm/eagercomm.h>
#include <stdio.h>

static int fail(const char* what) {
  fprintf(stderr, "capi consumer: %s: %s\n", what, ec_last_error());
  return 1;
}

int main(void) {
  ec_comm* comm = NULL;
  if (ec_comm_from_env(&comm) != EC_OK) return fail("ec_comm_from_env");
  int rank = -1, size = 0;
  if (ec_comm_rank(comm, &rank) != EC_OK || ec_comm_size(comm, &size) != EC_OK) {
    return fail("rank/size");
  }
  float x[3] = {(float)(rank + 1), 1.0f, -2.0f};
  if (ec_allreduce(comm, x, x, 3, EC_FLOAT32, EC_SUM, EC_TIMEOUT_DEFAULT) != EC_OK) {
    return fail("ec_allreduce");
  }
  if (x[0] != (float)(size * (size + 1) / 2) || x[1] != (float)size || x[2] != -2.0f * size) {
    fprintf(stderr, "capi consumer: allreduce gave %g %g %g with %d ranks\n", x[0], x[1], x[2],
            size);
    return 1;
  }
  if (ec_barrier(comm, EC_TIMEOUT_DEFAULT) != EC_OK) return fail("ec_barrier");
  if (ec_comm_destroy(comm) != EC_OK) return fail("ec_comm_destroy");
  ec_comm_free(comm);
  printf("OK rank %d of %d (C API, ABI %d)\n", rank, size, ec_abi_version());
  return 0;
}
