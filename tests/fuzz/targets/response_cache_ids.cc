// Cache ids as they arrive in response lists (engine/response_cache.h): the coordinator's ids
// applied to a rank's CacheReplica in list order, as Runtime::processResponse does (evictions
// erase, inserts add, id-only responses look up), and a worker's hit ids looked up in the
// coordinator's cache. Unknown ids must be reported, never dereferenced.
#include <vector>

#include "common/byte_codec.h"
#include "engine/message.h"
#include "engine/response_cache.h"
#include "fuzz_target.h"

using namespace hvd;
using namespace hvd::engine;

HVD_FUZZ_TARGET(response_cache_ids) {
  const std::vector<uint8_t> bytes(data, data + size);
  CacheReplica replica;
  CoordinatorCache coordinator(8);
  // A few entries to hit: ids 0..3 on both sides.
  for (uint32_t id = 0; id < 4; ++id) {
    Response r;
    TensorInfo t;
    t.name = "tensor." + std::to_string(id);
    t.shape = {int64_t(id) + 1};
    r.tensors.push_back(t);
    replica.insert(id, CacheEntry::fromResponse(r, t));
    std::vector<uint32_t> evicted;
    coordinator.insert(CacheEntry::fromResponse(r, t), 1, evicted);
  }
  try {
    if (messageType(bytes) == MessageType::kRequests) {
      RequestList list = decodeRequestList(bytes);
      for (uint32_t id : list.hits) {
        bool live = false;
        const CacheEntry* e = coordinator.find(id, &live);
        HVD_FUZZ_CHECK(e == nullptr || e->tensor.cacheId == id);
        if (e != nullptr && live) coordinator.touch(id);
      }
      return 0;
    }
    if (messageType(bytes) != MessageType::kResponses) return 0;
    ResponseList list = decodeResponseList(bytes);
    for (uint32_t id : list.hits) {
      const CacheEntry* e = replica.get(id);
      HVD_FUZZ_CHECK(e == nullptr || e->tensor.cacheId == id);
    }
    for (const Response& r : list.items) {
      if (r.params.kind == Kind::kEvict) {
        for (const auto& t : r.tensors) replica.erase(t.cacheId);
        continue;
      }
      for (const auto& t : r.tensors) {
        if (r.cachedForm) {
          const CacheEntry* e = replica.get(t.cacheId);
          if (e == nullptr) break;  // the runtime reports "Response cache out of sync"
          HVD_FUZZ_CHECK(e->tensor.cacheId == t.cacheId);
        }
        if (t.cacheInsert) {
          HVD_FUZZ_CHECK(t.cacheId != kNoCacheId);
          replica.insert(t.cacheId, CacheEntry::fromResponse(r, t));
          HVD_FUZZ_CHECK(replica.get(t.cacheId) != nullptr);
        }
      }
    }
  } catch (const DecodeError&) {
  }
  return 0;
}
