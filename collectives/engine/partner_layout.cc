#include "collectives/engine/partner_layout.h"

#include <algorithm>
#include <span>
#include <vector>

#include "collectives/algorithms/algorithms.h"

namespace eagercomm::detail {
namespace {

class PartnerLayout final : public MailboxLayout {
 public:
  PartnerLayout(int rank, int size, SlotShape data)
      : MailboxLayout(size),
        rank_(rank),
        mine_(data_partners(rank, size)),
        data_(data),
        near_(SlotShape{std::max<uint32_t>(2, data.slots / 2), data.slot_bytes}),
        control_(SlotShape{kControlSlots, std::min(kControlSlotBytes, data.slot_bytes)}) {}

  SlotShape shape(int receiver, int sender) const override {
    std::vector<int> computed;
    const std::span<const int> partners = partners_of(receiver, computed);
    if (!std::binary_search(partners.begin(), partners.end(), sender)) return control_;
    return partner_shape(receiver, sender);
  }

  size_t offset(int receiver, int sender) const override {
    std::vector<int> computed;
    const std::span<const int> partners = partners_of(receiver, computed);
    size_t data_bytes = 0;
    int data_before = 0;
    for (int q : partners) {
      if (q >= sender) break;
      data_bytes += partner_shape(receiver, q).bytes();
      ++data_before;
    }
    const int before = sender - (sender > receiver ? 1 : 0);
    return data_bytes + static_cast<size_t>(before - data_before) * control_.bytes();
  }

  size_t inbox_bytes(int receiver) const override {
    if (size() == 1) return data_.bytes();  // never written; an empty region is not allowed
    std::vector<int> computed;
    const std::span<const int> partners = partners_of(receiver, computed);
    size_t bytes = 0;
    for (int q : partners) bytes += partner_shape(receiver, q).bytes();
    const int others = size() - 1 - static_cast<int>(partners.size());
    return bytes + static_cast<size_t>(others) * control_.bytes();
  }

  SlotShape data_shape() const override { return data_; }

 private:
  SlotShape partner_shape(int receiver, int sender) const {
    const int d = (sender - receiver + size()) % size();
    return d == 1 || d == size() - 1 ? data_ : near_;
  }
  // This rank's partners (kept: the mailbox asks for them once per peer), or `receiver`'s,
  // computed into the caller's `computed`.
  std::span<const int> partners_of(int receiver, std::vector<int>& computed) const {
    if (receiver == rank_) return mine_;
    computed = data_partners(receiver, size());
    return computed;
  }

  const int rank_;
  const std::vector<int> mine_;
  const SlotShape data_, near_, control_;
};

}  // namespace

std::unique_ptr<MailboxLayout> partner_mailbox_layout(int rank, int size, SlotShape data) {
  return std::make_unique<PartnerLayout>(rank, size, data);
}

}  // namespace eagercomm::detail
