// What PartialAllreduce::create() (collectives/partial_allreduce.cc) settles with the other ranks
// before the object exists: that every rank passed the same arguments, and whether its rounds
// exchange through boxes. Both are collective: every rank calls them in the same order, and
// each runs allgathers tagged as the creation (so that a rank that started another collective
// meanwhile gets a mismatch, not a join). Not installed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "collectives/partial_allreduce.h"
#include "runtime/status.h"

namespace eagercomm::detail {

class CommCore;
class SmallBoxes;

// Every rank learns every rank's arguments, so all of them report the same error, or none:
// kMismatch naming the first argument that differs and the ranks, kInvalidArgument for one out
// of range.
Status agree_on_partial_arguments(CommCore& core, size_t count, DataType type, PartialMode mode,
                                  const PartialOptions& options, uint32_t stream);

// The object's own boxes for its rounds (partial_shared.h), or null: its rounds then run as
// messages. Every rank decides alike. A rank that has no boxes (the transport or the size rule
// them out, or allocating failed) publishes an empty record in the first exchange, and a rank
// that cannot map a peer's boxes says so in a second one, so all ranks fall back together.
Result<std::unique_ptr<SmallBoxes>> make_partial_round_boxes(CommCore& core, size_t data_bytes,
                                                             size_t bytes);

}  // namespace eagercomm::detail
