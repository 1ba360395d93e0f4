// IdMap: a hash map from 32-bit ids to values, for the engine's per-operation lookups by cache id
// (a few per tensor per step, on the critical path of a training step).
//
// std::unordered_map costs a modulo by a prime (an integer division) and a pointer chase per
// lookup; here ids index a power-of-two table directly (ids are handed out sequentially, so
// `id & mask` spreads them without a hash function) with linear probing.
//
// Contract: values live on the heap and never move, so pointers and references to them stay
// valid until that id is erased (inserting or erasing other ids does not invalidate them).
// The key kNoId (UINT32_MAX) is reserved. Not thread-safe.
//
// FlatIdMap<V> (= IdMap<V, false>) keeps small values inside the table instead: consecutive ids
// sit in consecutive slots, so a step that visits a few hundred ids reads a few contiguous cache
// lines rather than one heap object per id (what counts when a training step's compute has
// evicted the engine's state). The price: inserting or erasing any id may move every value, so
// pointers into a FlatIdMap last only until its next insert or erase.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

namespace hvd {

template <typename V, bool kStable = true>
class IdMap {
 public:
  static constexpr uint32_t kNoId = UINT32_MAX;

  V* find(uint32_t id) {
    if (size_ == 0) return nullptr;
    for (size_t i = id & mask_;; i = (i + 1) & mask_) {
      if (slots_[i].id == id) return valueOf(slots_[i]);
      if (slots_[i].id == kNoId) return nullptr;
    }
  }
  const V* find(uint32_t id) const { return const_cast<IdMap*>(this)->find(id); }

  // The value of `id`, default-constructed first if absent.
  V& operator[](uint32_t id) {
    if (V* v = find(id)) return *v;
    return *insertNew(id, Stored(box()));
  }
  // Sets `id` to `value` (replacing an existing value in place).
  V& assign(uint32_t id, V value) {
    if (V* v = find(id)) return *v = std::move(value);
    return *insertNew(id, Stored(box(std::move(value))));
  }

  bool erase(uint32_t id) {
    if (size_ == 0) return false;
    size_t i = id & mask_;
    while (slots_[i].id != id) {
      if (slots_[i].id == kNoId) return false;
      i = (i + 1) & mask_;
    }
    slots_[i] = Slot{};
    --size_;
    // Backward-shift deletion: pull later members of the probe run into the hole, so lookups
    // never need tombstones.
    for (size_t hole = i, j = (i + 1) & mask_; slots_[j].id != kNoId; j = (j + 1) & mask_) {
      size_t home = slots_[j].id & mask_;
      // Movable into the hole when its home is not cyclically within (hole, j].
      bool movable = hole <= j ? (home <= hole || home > j) : (home <= hole && home > j);
      if (movable) {
        slots_[hole] = std::move(slots_[j]);
        slots_[j] = Slot{};
        hole = j;
      }
    }
    return true;
  }

  // Calls f(id, value) for every entry, in no particular order. f must not modify the map.
  template <typename F>
  void forEach(F&& f) {
    for (auto& s : slots_) {
      if (s.id != kNoId) f(s.id, *valueOf(s));
    }
  }
  template <typename F>
  void forEach(F&& f) const {
    for (const auto& s : slots_) {
      if (s.id != kNoId) f(s.id, *valueOf(s));
    }
  }
  // Erases every entry for which pred(id, value) returns true.
  template <typename P>
  void eraseIf(P&& pred) {
    std::vector<uint32_t> doomed;
    forEach([&](uint32_t id, V& v) {
      if (pred(id, v)) doomed.push_back(id);
    });
    for (uint32_t id : doomed) erase(id);
  }

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  void clear() {
    slots_.clear();
    mask_ = 0;
    size_ = 0;
  }

 private:
  using Stored = std::conditional_t<kStable, std::unique_ptr<V>, V>;
  struct Slot {
    uint32_t id = kNoId;
    Stored value{};
  };
  template <typename... A>
  static Stored box(A&&... a) {
    if constexpr (kStable) {
      return std::make_unique<V>(std::forward<A>(a)...);
    } else {
      return V(std::forward<A>(a)...);
    }
  }
  static V* valueOf(Slot& s) {
    if constexpr (kStable) {
      return s.value.get();
    } else {
      return &s.value;
    }
  }
  static const V* valueOf(const Slot& s) { return valueOf(const_cast<Slot&>(s)); }

  V* insertNew(uint32_t id, Stored value) {
    if ((size_ + 1) * 4 > slots_.size() * 3) grow();  // load factor <= 3/4
    size_t i = id & mask_;
    while (slots_[i].id != kNoId) i = (i + 1) & mask_;
    slots_[i].id = id;
    slots_[i].value = std::move(value);
    ++size_;
    return valueOf(slots_[i]);
  }

  void grow() {
    std::vector<Slot> old = std::move(slots_);
    slots_ = std::vector<Slot>(old.empty() ? 16 : old.size() * 2);
    mask_ = slots_.size() - 1;
    for (auto& s : old) {
      if (s.id == kNoId) continue;
      size_t i = s.id & mask_;
      while (slots_[i].id != kNoId) i = (i + 1) & mask_;
      slots_[i] = std::move(s);
    }
  }

  std::vector<Slot> slots_;
  size_t mask_ = 0;
  size_t size_ = 0;
};

template <typename V>
using FlatIdMap = IdMap<V, false>;

}  // namespace hvd
