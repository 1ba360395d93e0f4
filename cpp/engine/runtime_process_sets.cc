// Runtime: the process-set lifecycle: adding and removing sets (collective over all ranks,
// through the coordinator like any operation), applying the agreed change on every rank, and the
// queries.
#include <algorithm>

#include "engine/runtime.h"
#include "horovod/errors.h"

namespace hvd::engine {
namespace {

std::string ranksText(const std::vector<int>& ranks) {
  return shapeString(std::vector<int64_t>(ranks.begin(), ranks.end()));
}

}  // namespace

int Runtime::addProcessSet(std::vector<int> ranks) {
  checkRunning();
  if (!config_.dynamicProcessSets) {
    throw InvalidArgument(
        "Set HOROVOD_DYNAMIC_PROCESS_SETS=1 to allow adding process sets after Horovod initialization.");
  }
  std::sort(ranks.begin(), ranks.end());
  if (ranks.empty() || ranks.front() < 0 || ranks.back() >= topology_.size ||
      std::adjacent_find(ranks.begin(), ranks.end()) != ranks.end()) {
    throw InvalidArgument("Invalid process set " + ranksText(ranks) + ": ranks must be distinct and in [0, " +
                          std::to_string(topology_.size) + ")");
  }
  if (sets_.find(ranks) >= 0) throw InvalidArgument("Attempted to add a duplicate process set: " + ranksText(ranks));
  auto e = std::make_unique<Entry>();
  e->request.params.kind = Kind::kAddProcessSet;
  e->request.name = "process_set.add";
  e->request.params.dtype = DataType::kUInt8;
  e->request.splits.assign(ranks.begin(), ranks.end());
  std::vector<EntryPtr> entries;
  entries.push_back(std::move(e));
  WorkPtr work = enqueue(std::move(entries), newWork(1));
  work->wait();
  return work->joinResult();
}

bool Runtime::removeProcessSet(int processSetId) {
  checkRunning();
  if (!config_.dynamicProcessSets) {
    throw InvalidArgument(
        "Set HOROVOD_DYNAMIC_PROCESS_SETS=1 to allow removing process sets after Horovod initialization.");
  }
  if (processSetId == 0 || !sets_.lookup(processSetId)) return false;
  auto e = std::make_unique<Entry>();
  e->request.params.kind = Kind::kRemoveProcessSet;
  e->request.name = "process_set.remove";
  e->request.params.dtype = DataType::kUInt8;
  e->request.splits = {processSetId};
  std::vector<EntryPtr> entries;
  entries.push_back(std::move(e));
  WorkPtr work = enqueue(std::move(entries), newWork(1));
  work->wait();
  return true;
}

std::vector<int> Runtime::processSetRanks(int processSetId) const {
  auto ranks = sets_.ranks(processSetId);
  if (!ranks) throw InvalidArgument("Process set does not exist or has not been registered.");
  return *ranks;
}

std::vector<int> Runtime::processSetIds() const { return sets_.ids(); }

void Runtime::addSetFromResponse(const Response& r) {
  std::vector<int> ranks(r.setRanks.begin(), r.setRanks.end());
  sets_.add(r.setId, std::move(ranks));
  if (observers_.wants(EngineEventKind::kProcessSetAdded)) [[unlikely]] {
    publishSetChange(EngineEventKind::kProcessSetAdded, r.setId,
                     std::vector<int>(r.setRanks.begin(), r.setRanks.end()));
  }
  if (Entry* e = pendingEntry(0, "process_set.add")) {
    e->work->setJoinResult(r.setId);
    completeEntry(e, nullptr);
  }
}

void Runtime::removeSetFromResponse(const Response& r) {
  // Operations still pending in the removed set can never run.
  std::vector<Entry*> orphans;
  for (NameSlot* slot : queue_.slotsWithEntries()) {
    if (slot->key.processSet == r.setId) orphans.push_back(slot->entry.get());
  }
  for (Entry* e : orphans) {
    completeEntry(e, std::make_exception_ptr(Error("Process set " + std::to_string(r.setId) +
                                                   " was removed while this operation was pending.")));
  }
  byCacheId_.eraseIf([&](uint32_t, Entry* e) { return e == nullptr || e->request.params.processSet == r.setId; });
  std::vector<int> removedRanks;
  const bool announce = observers_.wants(EngineEventKind::kProcessSetRemoved);
  if (announce) [[unlikely]] {
    if (const ProcessSet* gone = sets_.get(r.setId)) removedRanks = gone->ranks;
  }
  sets_.remove(r.setId);
  backends_.removeSet(r.setId);
  if (announce) [[unlikely]]
    publishSetChange(EngineEventKind::kProcessSetRemoved, r.setId, removedRanks);
  if (Entry* e = pendingEntry(0, "process_set.remove")) {
    e->work->setJoinResult(1);
    completeEntry(e, nullptr);
  }
}

}  // namespace hvd::engine
