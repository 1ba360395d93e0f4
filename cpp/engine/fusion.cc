#include "engine/fusion.h"

#include <cstdlib>
#include <deque>
#include <new>

#include "engine/negotiation.h"

namespace hvd::engine {
namespace {

bool fusable(const Response& r) {
  return r.kind == Kind::kAllreduce || r.kind == Kind::kReducescatter || r.kind == Kind::kAllgather;
}

const std::string& groupOf(const Response& r) { return r.tensors.front().data().group; }

bool compatible(const Response& a, const Response& b, const FusionOptions& options) {
  if (a.kind != b.kind || a.processSet != b.processSet || a.dtype != b.dtype || a.device != b.device) return false;
  if (a.sharedInPlace || b.sharedInPlace) return false;  // runs in the callers' shared buffers
  if (a.kind != Kind::kAllgather &&
      (a.op != b.op || a.prescale != b.prescale || a.postscale != b.postscale)) {
    return false;
  }
  if (options.disableGroupFusion) {
    // Every op is its own group then (ungrouped ones are groups of one).
    if (groupOf(a).empty() || groupOf(a) != groupOf(b)) return false;
  }
  return true;
}

}  // namespace

std::vector<Response> fuseResponses(std::vector<Response> responses, const FusionOptions& options) {
  if (options.threshold <= 0 || responses.size() < 2) return responses;
  std::deque<Response> queue(std::make_move_iterator(responses.begin()), std::make_move_iterator(responses.end()));
  std::vector<Response> out;
  out.reserve(queue.size());
  while (!queue.empty()) {
    Response current = std::move(queue.front());
    queue.pop_front();
    if (fusable(current)) {
      int64_t size = fusionBytes(current);
      int64_t skipped = 0;
      std::deque<Response> skippedResponses;
      while (!queue.empty()) {
        Response& next = queue.front();
        int64_t nextSize = fusionBytes(next);
        if (fusable(next) && compatible(current, next, options) && size + nextSize <= options.threshold) {
          size += nextSize;
          current.cachedForm = current.cachedForm && next.cachedForm;
          for (auto& t : next.tensors) current.tensors.push_back(std::move(t));
          queue.pop_front();
        } else {
          // Look ahead past an incompatible response (mixed precision interleaves dtypes) while
          // the skipped bytes would still have fit.
          skipped += nextSize;
          if (size + skipped > options.threshold) break;
          skippedResponses.push_back(std::move(next));
          queue.pop_front();
        }
      }
      while (!skippedResponses.empty()) {
        queue.push_front(std::move(skippedResponses.back()));
        skippedResponses.pop_back();
      }
    }
    out.push_back(std::move(current));
  }
  return out;
}

void FusionBuffer::Free::operator()(void* p) const { std::free(p); }

void* FusionBuffer::reserve(size_t bytes) {
  if (bytes <= capacity_ && data_) return data_.get();
  size_t want = std::max<size_t>(bytes, 64);
  want = (want + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, want);
  if (p == nullptr) throw std::bad_alloc();
  data_.reset(p);
  capacity_ = want;
  return p;
}

}  // namespace hvd::engine
