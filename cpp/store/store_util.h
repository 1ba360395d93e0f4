// Helpers shared by the Store implementations (internal to cpp/store).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "store/store.h"

namespace hvd::store_detail {

// "'a', 'b'" (at most a handful of names, then "and N more").
std::string quoteKeys(const std::vector<std::string>& keys);
// hvd::Timeout's message for a wait on `keys` in `where` ("memory store", "rendezvous server at h:p").
std::string timeoutMessage(const std::string& op, const std::vector<std::string>& keys, const std::string& where);
// add(): counters are stored as decimal text (so get() of a counter reads "5"). Throws StoreError
// if an existing value is not an integer.
int64_t parseCounter(const std::string& key, const Bytes& value);
Bytes formatCounter(int64_t value);
// current + delta for add() on `key`; throws StoreError when the sum leaves the int64 range.
int64_t addToCounter(const std::string& key, int64_t current, int64_t delta);

}  // namespace hvd::store_detail
