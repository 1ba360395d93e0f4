// A message laid out as pieces end to end, each read from its own input and written to its own
// output (internal to collectives/). A fused allreduce of many tensors runs over the tensors
// where they are, instead of copying them into a fusion buffer and the results back out: for a
// 24 MB step of 160 gradients that is two full memory passes saved.
//
// MessageIo is what the shared-memory algorithms read and write through: one contiguous
// (in, out) pair, or a piece list. Element offsets are into the concatenation.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "collectives/collectives.h"
#include "collectives/stream_copy.h"

namespace hvd::collectives {

class MessageIo {
 public:
  MessageIo(const void* in, void* out, size_t elementSize)
      : elem_(elementSize), in_(static_cast<const uint8_t*>(in)), out_(static_cast<uint8_t*>(out)) {}
  // `pieces` must outlive this object; `starts` (scratch) receives each piece's first element.
  MessageIo(const std::vector<Piece>& pieces, size_t elementSize, std::vector<size_t>& starts)
      : elem_(elementSize), pieces_(&pieces), starts_(&starts) {
    starts.clear();
    size_t at = 0;
    for (const Piece& p : pieces) {
      starts.push_back(at);
      at += p.count;
    }
  }

  // The input from element `begin` on, as one contiguous run of at most `count` elements;
  // `count` is cut to the run's length.
  const uint8_t* inputRun(size_t begin, size_t& count) const {
    if (pieces_ == nullptr) return in_ + begin * elem_;
    size_t i = pieceAt(begin), within = begin - (*starts_)[i];
    count = std::min(count, (*pieces_)[i].count - within);
    return static_cast<const uint8_t*>((*pieces_)[i].in) + within * elem_;
  }
  uint8_t* outputRun(size_t begin, size_t& count) const {
    if (pieces_ == nullptr) return out_ + begin * elem_;
    size_t i = pieceAt(begin), within = begin - (*starts_)[i];
    count = std::min(count, (*pieces_)[i].count - within);
    return static_cast<uint8_t*>((*pieces_)[i].out) + within * elem_;
  }

  // Copies input elements [begin, begin + count) to dst.
  void read(size_t begin, size_t count, void* dst) const {
    auto* d = static_cast<uint8_t*>(dst);
    while (count > 0) {
      size_t run = count;
      const uint8_t* src = inputRun(begin, run);
      std::memcpy(d, src, run * elem_);
      d += run * elem_;
      begin += run;
      count -= run;
    }
  }
  // Copies src to output elements [begin, begin + count), with streaming stores when `stream`
  // (the caller fences: streamFence()).
  void write(size_t begin, const void* src, size_t count, bool stream) const {
    const auto* s = static_cast<const uint8_t*>(src);
    while (count > 0) {
      size_t run = count;
      uint8_t* dst = outputRun(begin, run);  // cuts `run` first
      streamOrCopy(dst, s, run * elem_, stream);
      s += run * elem_;
      begin += run;
      count -= run;
    }
  }

 private:
  size_t pieceAt(size_t element) const {
    // Callers walk forward: try the piece of the previous call and its successor first.
    const std::vector<size_t>& starts = *starts_;
    const size_t n = starts.size();
    for (size_t i = hint_; i < n && i < hint_ + 2; ++i) {
      if (starts[i] <= element && (i + 1 == n || element < starts[i + 1])) return hint_ = i;
    }
    // Pieces of zero elements share a start: the last of them holds the element.
    hint_ = static_cast<size_t>(std::upper_bound(starts.begin(), starts.end(), element) - starts.begin()) - 1;
    return hint_;
  }

  size_t elem_;
  const uint8_t* in_ = nullptr;
  uint8_t* out_ = nullptr;
  const std::vector<Piece>* pieces_ = nullptr;
  const std::vector<size_t>* starts_ = nullptr;
  mutable size_t hint_ = 0;
};

}  // namespace hvd::collectives
