#include "ops/workspace.h"

#include <vector>

#include "ops/dispatch.h"

namespace kiln::ops {
namespace {

thread_local WorkspaceScope* t_scope = nullptr;

}  // namespace

// The bytes a scope's workspaces hold, as a stack of blocks.
struct WorkspaceScope::Stack {
  struct Block {
    size_t at = 0, size = 0;
    bool freed = false;
  };
  std::vector<Block> blocks;
  size_t top = 0, high = 0;

  size_t push(size_t size) {
    const size_t at = top;
    blocks.push_back({at, size, false});
    top += size;
    high = std::max(high, top);
    return at;
  }
  void release(size_t at) noexcept {
    for (Block& b : blocks)
      if (b.at == at && !b.freed) {
        b.freed = true;
        break;
      }
    while (!blocks.empty() && blocks.back().freed) {
      top = blocks.back().at;
      blocks.pop_back();
    }
  }
};

WorkspaceScope::WorkspaceScope(Device device)
    : device_(device), stack_(std::make_shared<Stack>()), previous_(t_scope) {
  t_scope = this;
}

WorkspaceScope::WorkspaceScope(Device device, std::shared_ptr<Storage> arena, size_t offset, size_t capacity)
    : device_(device),
      arena_(std::move(arena)),
      offset_(offset),
      capacity_(capacity),
      stack_(std::make_shared<Stack>()),
      previous_(t_scope) {
  t_scope = this;
}

WorkspaceScope::~WorkspaceScope() { t_scope = previous_; }

size_t WorkspaceScope::high_water() const noexcept { return stack_->high; }

size_t WorkspaceScope::rounded(size_t nbytes, Device device) noexcept {
  const size_t align = device.is_cuda() ? 256 : 64;
  return (std::max<size_t>(nbytes, 1) + align - 1) / align * align;
}

Tensor make_workspace(size_t nbytes, Device device) {
  WorkspaceScope* scope = t_scope;
  if (!scope || !(scope->device_ == device)) return make_tensor({static_cast<int64_t>(nbytes)}, kUInt8, device);
  const size_t size = WorkspaceScope::rounded(nbytes, device);
  const size_t at = scope->stack_->push(size);
  std::shared_ptr<Storage> storage;
  if (scope->arena_ && at + size <= scope->capacity_) {
    scope->served_ += size;
    storage = std::make_shared<Storage>(static_cast<char*>(scope->arena_->data()) + scope->offset_ + at, nbytes,
                                        device, [keep = scope->arena_, stack = scope->stack_, at](void*) {
                                          stack->release(at);
                                        });
  } else {
    // Measured (or past the slice): the allocator's memory, given back with
    // the workspace.
    std::shared_ptr<Storage> own = make_tensor({static_cast<int64_t>(nbytes)}, kUInt8, device).storage();
    void* data = own->data();
    storage = std::make_shared<Storage>(data, nbytes, device, [own = std::move(own), stack = scope->stack_, at](void*) {
      stack->release(at);
    });
  }
  return make_tensor(std::move(storage), {static_cast<int64_t>(nbytes)}, kUInt8);
}

}  // namespace kiln::ops
