#include "engine/fusion.h"

#include <cstdlib>
#include <new>
#include <string>

#include "engine/negotiation.h"
#include "horovod/errors.h"

namespace hvd::engine {
namespace {

bool fusableKind(Kind k) {
  return k == Kind::kAllreduce || k == Kind::kAdasum || k == Kind::kReducescatter || k == Kind::kAllgather;
}
bool fusable(const Response& r) { return fusableKind(r.params.kind); }

const std::string& groupOf(const Response& r) { return r.tensors.front().data().group; }
const std::string& groupOf(const CacheEntry& e) { return e.tensor.group; }

// A and B: Response or CacheEntry.
template <typename A, typename B>
bool compatible(const A& a, const B& b, const FusionOptions& options) {
  const OpParams& p = a.params;
  const OpParams& q = b.params;
  if (p.kind != q.kind || p.processSet != q.processSet || p.dtype != q.dtype || p.device != q.device) return false;
  if (p.sharedInPlace || q.sharedInPlace) return false;  // runs in the callers' shared buffers
  if (p.kind != Kind::kAllgather && (p.op != q.op || p.prescale != q.prescale || p.postscale != q.postscale)) {
    return false;
  }
  if (options.disableGroupFusion) {
    // Every op is its own group then (ungrouped ones are groups of one).
    if (groupOf(a).empty() || groupOf(a) != groupOf(b)) return false;
  }
  return true;
}

// The fusion rule, in one place for the negotiated (fuseResponses) and the cached
// (cachedResponses) paths, which must fuse alike: walk the n items in order; each item not yet
// taken opens a group and, when it is fusable and the threshold is positive, takes every later
// compatible item that still fits under the threshold, looking past other items (mixed
// precision interleaves dtypes) while the bytes skipped would still have fit. emit(members) is
// called once per group, in order, with the members' indices (first = the group's opener).
template <typename BytesAt, typename FusableAt, typename CompatibleAt, typename Emit>
void planFusion(size_t n, int64_t threshold, BytesAt bytesAt, FusableAt fusableAt, CompatibleAt compatibleAt,
                Emit emit) {
  std::vector<int64_t> bytes(n);
  for (size_t i = 0; i < n; ++i) bytes[i] = bytesAt(i);
  std::vector<char> taken(n, 0);
  std::vector<size_t> members;
  for (size_t i = 0; i < n; ++i) {
    if (taken[i]) continue;
    members.assign(1, i);
    if (threshold > 0 && fusableAt(i)) {
      int64_t size = bytes[i], skipped = 0;
      for (size_t j = i + 1; j < n; ++j) {
        if (taken[j]) continue;
        if (fusableAt(j) && compatibleAt(i, j) && size + bytes[j] <= threshold) {
          size += bytes[j];
          taken[j] = 1;
          members.push_back(j);
        } else {
          skipped += bytes[j];
          if (size + skipped > threshold) break;
        }
      }
    }
    emit(members);
  }
}

}  // namespace

std::vector<Response> fuseResponses(std::vector<Response> responses, const FusionOptions& options) {
  if (options.threshold <= 0 || responses.size() < 2) return responses;
  std::vector<Response> out;
  out.reserve(responses.size());
  planFusion(
      responses.size(), options.threshold, [&](size_t i) { return fusionBytes(responses[i]); },
      [&](size_t i) { return fusable(responses[i]); },
      [&](size_t a, size_t b) { return compatible(responses[a], responses[b], options); },
      [&](const std::vector<size_t>& members) {
        Response current = std::move(responses[members.front()]);
        for (size_t k = 1; k < members.size(); ++k) {
          Response& next = responses[members[k]];
          current.cachedForm = current.cachedForm && next.cachedForm;
          for (auto& t : next.tensors) current.tensors.push_back(std::move(t));
        }
        out.push_back(std::move(current));
      });
  return out;
}

void cachedResponses(const std::vector<uint32_t>& ids, const CacheReplica& replica, const FusionOptions& options,
                     std::vector<Response>& out) {
  out.clear();
  std::vector<const CacheEntry*> entries;
  entries.reserve(ids.size());
  for (uint32_t id : ids) {
    const CacheEntry* e = replica.get(id);
    if (e == nullptr) throw Error("Response cache out of sync: unknown cache id " + std::to_string(id));
    entries.push_back(e);
  }
  planFusion(
      entries.size(), options.threshold,
      [&](size_t i) { return fusionBytes(entries[i]->params.kind, entries[i]->params.dtype, entries[i]->tensor); },
      [&](size_t i) { return fusableKind(entries[i]->params.kind); },
      [&](size_t a, size_t b) { return compatible(*entries[a], *entries[b], options); },
      [&](const std::vector<size_t>& members) {
        Response r;
        r.params = entries[members.front()]->params;
        r.cachedForm = true;
        r.tensors.reserve(members.size());
        for (size_t m : members) {
          TensorInfo& t = r.tensors.emplace_back();
          t.cacheId = entries[m]->tensor.cacheId;
          t.ref = &entries[m]->tensor;
        }
        out.push_back(std::move(r));
      });
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
