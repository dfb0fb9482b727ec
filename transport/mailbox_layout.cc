#include "transport/mailbox_layout.h"

namespace eagercomm {
namespace {

class UniformLayout final : public MailboxLayout {
 public:
  UniformLayout(int size, SlotShape shape) : MailboxLayout(size), shape_(shape) {}
  SlotShape shape(int, int) const override { return shape_; }
  size_t offset(int receiver, int sender) const override {
    return static_cast<size_t>(sender - (sender > receiver ? 1 : 0)) * shape_.bytes();
  }
  size_t inbox_bytes(int) const override {
    return static_cast<size_t>(size() > 1 ? size() - 1 : 1) * shape_.bytes();
  }
  SlotShape data_shape() const override { return shape_; }

 private:
  SlotShape shape_;
};

}  // namespace

std::unique_ptr<MailboxLayout> uniform_mailbox_layout(int size, SlotShape shape) {
  return std::make_unique<UniformLayout>(size, shape);
}

uint64_t mailbox_registered_bytes(const MailboxLayout& layout, int rank, bool staged) {
  const uint64_t inbox = layout.inbox_bytes(rank);
  return staged ? 2 * inbox : inbox;
}

}  // namespace eagercomm
