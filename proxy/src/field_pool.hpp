// The memory resource a connection's header fields come from (exchange.hpp): each message's
// fields are a few dozen small blocks, allocated as they are parsed or set and freed with the
// message. Freed blocks wait on a list per size class for the next message; a block is found
// with one shift, where std::pmr::unsynchronized_pool_resource searches its pool sizes on
// every allocation and every free. One strand only: no locking.
#pragma once

#include <array>
#include <cstddef>
#include <memory_resource>
#include <new>
#include <vector>

namespace sluice::proxy {

class FieldPool final : public std::pmr::memory_resource {
 public:
  FieldPool() = default;
  FieldPool(const FieldPool&) = delete;
  FieldPool& operator=(const FieldPool&) = delete;
  ~FieldPool() override {
    for (void* chunk : chunks_) ::operator delete(chunk);
  }
  /// Bytes taken from the heap for pooled blocks (held until the pool goes).
  std::size_t reserved() const { return chunks_.size() * kChunk; }

 private:
  static constexpr std::size_t kGrain = 64;    // size classes are multiples of this
  static constexpr std::size_t kClasses = 32;  // pooled up to 2 KiB; larger blocks: the heap
  static constexpr std::size_t kChunk = 8 * 1024;
  struct FreeBlock {
    FreeBlock* next;
  };

  static bool pooled(std::size_t bytes, std::size_t align) {
    return bytes <= kGrain * kClasses && align <= alignof(std::max_align_t);
  }
  static std::size_t sizeClass(std::size_t bytes) { return bytes == 0 ? 0 : (bytes - 1) / kGrain; }

  void* do_allocate(std::size_t bytes, std::size_t align) override {
    if (!pooled(bytes, align)) return ::operator new(bytes, std::align_val_t(align));
    const std::size_t c = sizeClass(bytes);
    if (FreeBlock* b = free_[c]) {
      free_[c] = b->next;
      return b;
    }
    return carve((c + 1) * kGrain);
  }

  void do_deallocate(void* p, std::size_t bytes, std::size_t align) override {
    if (!pooled(bytes, align)) {
      ::operator delete(p, bytes, std::align_val_t(align));
      return;
    }
    const std::size_t c = sizeClass(bytes);
    free_[c] = new (p) FreeBlock{free_[c]};
  }

  bool do_is_equal(const std::pmr::memory_resource& other) const noexcept override {
    return this == &other;
  }

  // A fresh block from the current chunk (multiples of kGrain keep every block aligned); the
  // tail of a chunk too short for the block is left unused.
  void* carve(std::size_t size) {
    if (left_ < size) {
      chunks_.push_back(::operator new(kChunk));
      next_ = static_cast<std::byte*>(chunks_.back());
      left_ = kChunk;
    }
    void* p = next_;
    next_ += size;
    left_ -= size;
    return p;
  }

  std::array<FreeBlock*, kClasses> free_{};
  std::vector<void*> chunks_;
  std::byte* next_ = nullptr;
  std::size_t left_ = 0;
};

}  // namespace sluice::proxy
