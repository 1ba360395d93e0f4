#include "store/store.h"

#include <cerrno>
#include <cstdlib>

#include "horovod/errors.h"
#include "store/store_util.h"

namespace hvd {

void setString(Store& store, const std::string& key, const std::string& value, Deadline deadline) {
  store.set(key, Bytes(value.begin(), value.end()), deadline);
}

std::string getString(Store& store, const std::string& key, Deadline deadline) {
  Bytes value = store.get(key, deadline);
  return std::string(value.begin(), value.end());
}

namespace store_detail {

std::string quoteKeys(const std::vector<std::string>& keys) {
  constexpr size_t kShown = 8;
  std::string out;
  for (size_t i = 0; i < keys.size() && i < kShown; ++i) {
    if (i > 0) out += ", ";
    out += "'" + keys[i] + "'";
  }
  if (keys.size() > kShown) out += " and " + std::to_string(keys.size() - kShown) + " more";
  return out;
}

std::string timeoutMessage(const std::string& op, const std::vector<std::string>& keys, const std::string& where) {
  return "Timed out in " + op + " waiting for rendezvous key" + (keys.size() == 1 ? " " : "s ") + quoteKeys(keys) +
         " (" + where + "); the ranks that should set them may have failed or not started";
}

int64_t parseCounter(const std::string& key, const Bytes& value) {
  std::string text(value.begin(), value.end());
  errno = 0;
  char* end = nullptr;
  long long n = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || errno != 0 || *end != '\0') {
    throw StoreError("add() on rendezvous key '" + key + "' whose value is not an integer");
  }
  return n;
}

int64_t addToCounter(const std::string& key, int64_t current, int64_t delta) {
  int64_t sum;
  if (__builtin_add_overflow(current, delta, &sum)) {
    throw StoreError("add(" + std::to_string(delta) + ") on rendezvous key '" + key + "' overflows its value " +
                     std::to_string(current));
  }
  return sum;
}

Bytes formatCounter(int64_t value) {
  std::string text = std::to_string(value);
  return Bytes(text.begin(), text.end());
}

}  // namespace store_detail
}  // namespace hvd
