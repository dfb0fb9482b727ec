// Which processes share a host, in the sense shared memory needs: the same kernel boot and the
// same IPC namespace. Transport "auto" (transport/registry.cc) compares the string to choose shm;
// ucx carries the hash in its address to decide whether a peer may reach it through shared
// memory. One function, so that the two never disagree.
#pragma once

#include <cstdint>
#include <string>

namespace eagercomm {

// "<boot id>/<IPC namespace>/<host name>" ("?" for a namespace that cannot be read; the host
// name tells hosts apart where /proc says nothing, and names the host in logs). Equal on two
// processes that may map each other's memory.
std::string host_identity();

// fnv1a(host_identity()): the word ucx addresses carry (transport/ucx/ucx_wire.h).
uint64_t host_identity_hash();

}  // namespace eagercomm
