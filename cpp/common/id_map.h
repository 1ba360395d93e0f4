// IdMap: a hash map from 32-bit ids to values, for the engine's per-operation lookups by cache id
// (a few per tensor per step, on the critical path of a training step).
//
// std::unordered_map costs a modulo by a prime (an integer division) and a pointer chase per
// lookup; here ids index a power-of-two table directly (ids are handed out sequentially, so
// `id & mask` spreads them without a hash function) with linear probing, Robin Hood style: an
// id never sits further from its home slot than the ids it passed. Sequential ids form long
// runs of occupied slots (a cache sliding over its newest 1024 ids is one run of 1024), and
// the invariant lets an erase, or a lookup of an absent id, stop at the first id that sits
// nearer its home than the probe, instead of walking the run to its end.
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
    for (size_t i = id & mask_, probe = 0;; i = (i + 1) & mask_, ++probe) {
      if (slots_[i].id == id) return valueOf(slots_[i]);
      // An empty slot, or an id nearer its home than `id` would be here: `id` is absent.
      if (slots_[i].id == kNoId || distance(i, slots_[i].id) < probe) return nullptr;
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
    for (size_t probe = 0; slots_[i].id != id; i = (i + 1) & mask_, ++probe) {
      if (slots_[i].id == kNoId || distance(i, slots_[i].id) < probe) return false;
    }
    slots_[i] = Slot{};
    --size_;
    // Backward-shift deletion (no tombstones): the ids after the hole that are away from their
    // home move back one slot each, up to the first empty slot or id at home.
    for (size_t hole = i, j = (i + 1) & mask_; slots_[j].id != kNoId && distance(j, slots_[j].id) > 0;
         hole = j, j = (j + 1) & mask_) {
      slots_[hole] = std::move(slots_[j]);
      slots_[j] = Slot{};
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

  // How far slot `i` is from the home of `id`.
  size_t distance(size_t i, uint32_t id) const { return (i - (id & mask_)) & mask_; }

  V* insertNew(uint32_t id, Stored value) {
    if ((size_ + 1) * 4 > slots_.size() * 3) grow();  // load factor <= 3/4
    ++size_;
    return valueOf(slots_[place(Slot{id, std::move(value)})]);
  }

  // Robin Hood insertion of an absent id: walking from its home, it takes the first slot that is
  // empty or held by an id nearer its own home, and that id walks on the same way. Returns the
  // slot where `carried` landed.
  size_t place(Slot carried) {
    size_t landed = SIZE_MAX;
    for (size_t i = carried.id & mask_, probe = 0;; i = (i + 1) & mask_, ++probe) {
      Slot& s = slots_[i];
      if (s.id == kNoId) {
        s = std::move(carried);
        return landed == SIZE_MAX ? i : landed;
      }
      size_t theirs = distance(i, s.id);
      if (theirs < probe) {
        std::swap(s, carried);
        if (landed == SIZE_MAX) landed = i;
        probe = theirs;
      }
    }
  }

  void grow() {
    std::vector<Slot> old = std::move(slots_);
    slots_ = std::vector<Slot>(old.empty() ? 16 : old.size() * 2);
    mask_ = slots_.size() - 1;
    for (auto& s : old) {
      if (s.id != kNoId) place(std::move(s));
    }
  }

  std::vector<Slot> slots_;
  size_t mask_ = 0;
  size_t size_ = 0;
};

template <typename V>
using FlatIdMap = IdMap<V, false>;

}  // namespace hvd
