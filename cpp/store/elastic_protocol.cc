#include "store/elastic_protocol.h"

#include <sstream>

#include "horovod/errors.h"

namespace hvd::elastic {
namespace {

const std::string kPrefix = "elastic/";

std::string initsKey(const std::string& id) { return kPrefix + "inits/" + id; }
std::string assignKey(const std::string& id, int64_t k) { return kPrefix + "assign/" + id + "/" + std::to_string(k); }
std::string updateKey(int64_t i) { return kPrefix + "update/" + std::to_string(i); }
const std::string kEvents = kPrefix + "events";
const std::string kUpdates = kPrefix + "updates";

}  // namespace

std::string encodeAssignment(const Assignment& a) {
  std::ostringstream out;
  switch (a.kind) {
    case Assignment::Kind::kJoin:
      out << "join " << a.round << ' ' << a.placement.rank << ' ' << a.placement.size << ' ' << a.placement.localRank
          << ' ' << a.placement.localSize << ' ' << a.placement.crossRank << ' ' << a.placement.crossSize << ' '
          << a.updatesSeen;
      break;
    case Assignment::Kind::kRemoved: out << "removed " << a.message; break;
    case Assignment::Kind::kAbort: out << "abort " << a.message; break;
  }
  return out.str();
}

Assignment decodeAssignment(const std::string& text) {
  Assignment a;
  std::istringstream in(text);
  std::string kind;
  in >> kind;
  if (kind == "join") {
    a.kind = Assignment::Kind::kJoin;
    in >> a.round >> a.placement.rank >> a.placement.size >> a.placement.localRank >> a.placement.localSize >>
        a.placement.crossRank >> a.placement.crossSize >> a.updatesSeen;
    if (!in || a.placement.size <= 0 || a.placement.rank < 0 || a.placement.rank >= a.placement.size) {
      throw Error("malformed elastic assignment from the launcher: '" + text + "'");
    }
    return a;
  }
  if (kind != "removed" && kind != "abort")
    throw Error("malformed elastic assignment from the launcher: '" + text + "'");
  a.kind = kind == "removed" ? Assignment::Kind::kRemoved : Assignment::Kind::kAbort;
  size_t space = text.find(' ');
  a.message = space == std::string::npos ? "" : text.substr(space + 1);
  return a;
}

Assignment requestAssignment(Store& store, const std::string& workerId, Deadline deadline) {
  int64_t k = store.add(initsKey(workerId), 1, deadline) - 1;
  store.add(kEvents, 1, deadline);
  return decodeAssignment(getString(store, assignKey(workerId, k), deadline));
}

HostUpdates readHostUpdates(Store& store, int64_t since, Deadline deadline) {
  HostUpdates u;
  u.latest = store.add(kUpdates, 0, deadline);
  for (int64_t i = since + 1; i <= u.latest; ++i) {
    u.flags |= std::stoi(getString(store, updateKey(i), deadline));
  }
  return u;
}

void reportSuspect(Store& store, int64_t round, int rank, Deadline deadline) {
  store.add(kPrefix + "suspect/" + std::to_string(round) + "/" + std::to_string(rank), 1, deadline);
}

bool isSuspect(Store& store, int64_t round, int rank, Deadline deadline) {
  return store.add(kPrefix + "suspect/" + std::to_string(round) + "/" + std::to_string(rank), 0, deadline) > 0;
}

int64_t readEvents(Store& store, Deadline deadline) { return store.add(kEvents, 0, deadline); }

int64_t readInits(Store& store, const std::string& workerId, Deadline deadline) {
  return store.add(initsKey(workerId), 0, deadline);
}

void publishAssignment(Store& store, const std::string& workerId, int64_t k, const Assignment& a, Deadline deadline) {
  setString(store, assignKey(workerId, k), encodeAssignment(a), deadline);
}

int64_t announceHostUpdate(Store& store, int flags, Deadline deadline) {
  // The flags first, then the counter that makes them visible.
  int64_t next = store.add(kUpdates, 0, deadline) + 1;
  setString(store, updateKey(next), std::to_string(flags), deadline);
  store.add(kUpdates, 1, deadline);
  return next;
}

int64_t readUpdateCount(Store& store, Deadline deadline) { return store.add(kUpdates, 0, deadline); }

}  // namespace hvd::elastic
