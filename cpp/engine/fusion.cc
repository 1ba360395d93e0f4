#include "engine/fusion.h"

#include <cstdlib>
#include <deque>
#include <new>
#include <string>

#include "engine/negotiation.h"
#include "horovod/errors.h"

namespace hvd::engine {
namespace {

bool fusableKind(Kind k) { return k == Kind::kAllreduce || k == Kind::kReducescatter || k == Kind::kAllgather; }
bool fusable(const Response& r) { return fusableKind(r.kind); }

const std::string& groupOf(const Response& r) { return r.tensors.front().data().group; }
const std::string& groupOf(const CacheEntry& e) { return e.tensor.group; }

// A and B: Response or CacheEntry (the same op-parameter fields).
template <typename A, typename B>
bool compatible(const A& a, const B& b, const FusionOptions& options) {
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

void cachedResponses(const std::vector<uint32_t>& ids, const CacheReplica& replica, const FusionOptions& options,
                     std::vector<Response>& out) {
  out.clear();
  struct Single {
    const CacheEntry* entry;
    int64_t bytes;
    bool used;
  };
  std::vector<Single> singles;
  singles.reserve(ids.size());
  for (uint32_t id : ids) {
    const CacheEntry* e = replica.get(id);
    if (e == nullptr) throw Error("Response cache out of sync: unknown cache id " + std::to_string(id));
    singles.push_back(Single{e, fusionBytes(e->kind, e->dtype, e->tensor), false});
  }
  auto add = [](Response& r, const CacheEntry& e) {
    TensorInfo& t = r.tensors.emplace_back();
    t.cacheId = e.tensor.cacheId;
    t.ref = &e.tensor;
  };
  std::vector<size_t> members;
  for (size_t i = 0; i < singles.size(); ++i) {
    if (singles[i].used) continue;
    const CacheEntry& first = *singles[i].entry;
    members.assign(1, i);
    if (options.threshold > 0 && fusableKind(first.kind)) {
      int64_t size = singles[i].bytes, skipped = 0;
      for (size_t j = i + 1; j < singles.size(); ++j) {
        Single& next = singles[j];
        if (next.used) continue;
        if (fusableKind(next.entry->kind) && compatible(first, *next.entry, options) &&
            size + next.bytes <= options.threshold) {
          size += next.bytes;
          next.used = true;
          members.push_back(j);
        } else {
          skipped += next.bytes;
          if (size + skipped > options.threshold) break;
        }
      }
    }
    Response r;
    copyOpParams(first, r);
    r.cachedForm = true;
    r.tensors.reserve(members.size());
    for (size_t m : members) add(r, *singles[m].entry);
    out.push_back(std::move(r));
  }
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
