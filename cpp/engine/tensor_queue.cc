#include "engine/tensor_queue.h"

#include "horovod/errors.h"

namespace hvd::engine {

namespace {
// Released entries kept for reuse: enough for a large model's gradients in flight at once.
constexpr size_t kMaxFreeEntries = 4096;

const char kDuplicateName[] =
    "Requested to allreduce, allgather, or broadcast a tensor with the same name as another tensor that is "
    "currently being processed.  If you want to request another tensor, use a different tensor name.";
}  // namespace

NameSlot* TensorQueue::intern(const Request& r) {
  auto it = slots_.find(NameKeyRef{r.params.processSet, r.name});
  if (it != slots_.end()) return it->second.get();
  auto slot = std::make_unique<NameSlot>();
  slot->key = NameKey{r.params.processSet, r.name};
  slot->fresh = true;
  NameSlot* raw = slot.get();
  slots_.emplace(NameKeyRef{raw->key.processSet, raw->key.name}, std::move(slot));
  return raw;
}

void TensorQueue::push(std::vector<EntryPtr>& entries) {
  std::lock_guard<SpinLock> lock(mu_);
  if (closedWith_) std::rethrow_exception(closedWith_->toException());
  // Marks the names pending one by one (one hash lookup each): a name found pending is a
  // duplicate of an earlier push or of this batch. Then the marks made here are undone, the
  // slots interned here dropped, and nothing is added.
  for (size_t i = 0; i < entries.size(); ++i) {
    NameSlot* slot = intern(entries[i]->request);
    if (slot->pending) {
      for (size_t j = 0; j < i; ++j) {
        NameSlot* marked = entries[j]->slot;
        entries[j]->slot = nullptr;
        marked->pending = false;
        if (marked->fresh) slots_.erase(slots_.find(NameKeyRef{marked->key.processSet, marked->key.name}));
      }
      throw InvalidArgument(kDuplicateName);
    }
    slot->pending = true;
    entries[i]->slot = slot;
  }
  for (auto& e : entries) {
    e->slot->fresh = false;
    queue_.push_back(std::move(e));
  }
  pushes_.fetch_add(entries.size(), std::memory_order_release);
  entries.clear();
}

void TensorQueue::push(EntryPtr& entry) {
  std::lock_guard<SpinLock> lock(mu_);
  if (closedWith_) std::rethrow_exception(closedWith_->toException());
  NameSlot* slot = intern(entry->request);
  if (slot->pending) throw InvalidArgument(kDuplicateName);
  slot->pending = true;
  slot->fresh = false;
  entry->slot = slot;
  queue_.push_back(std::move(entry));
  pushes_.fetch_add(1, std::memory_order_release);
}

void TensorQueue::drain(std::vector<EntryPtr>& out) {
  std::lock_guard<SpinLock> lock(mu_);
  if (queue_.empty()) return;
  if (out.empty()) {
    out.swap(queue_);
  } else {
    for (auto& e : queue_) out.push_back(std::move(e));
    queue_.clear();
  }
}

bool TensorQueue::empty() const {
  std::lock_guard<SpinLock> lock(mu_);
  return queue_.empty();
}

void TensorQueue::release(EntryPtr entry, bool keepSlot) {
  Request& r = entry->request;
  NameSlot* slot = entry->slot;
  std::lock_guard<SpinLock> lock(mu_);
  if (slot != nullptr) {
    slot->pending = false;
    if (!keepSlot && !slot->entry) {
      auto it = slots_.find(NameKeyRef{slot->key.processSet, slot->key.name});
      if (it != slots_.end() && it->second.get() == slot) slots_.erase(it);
    }
  }
  if (free_.size() >= kMaxFreeEntries) return;
  Entry fresh;  // every field cleared; the name and shape keep their allocations
  fresh.request.name = std::move(r.name);
  fresh.request.name.clear();
  fresh.request.shape = std::move(r.shape);
  fresh.request.shape.clear();
  *entry = std::move(fresh);
  free_.push_back(std::move(entry));
}

NameSlot* TensorQueue::find(int32_t processSet, std::string_view name) {
  std::lock_guard<SpinLock> lock(mu_);
  auto it = slots_.find(NameKeyRef{processSet, name});
  return it == slots_.end() ? nullptr : it->second.get();
}

void TensorQueue::forget(int32_t processSet, std::string_view name) {
  std::lock_guard<SpinLock> lock(mu_);
  auto it = slots_.find(NameKeyRef{processSet, name});
  if (it != slots_.end() && !it->second->pending && !it->second->entry) slots_.erase(it);
}

std::vector<NameSlot*> TensorQueue::slotsWithEntries() {
  std::lock_guard<SpinLock> lock(mu_);
  std::vector<NameSlot*> out;
  for (auto& [key, slot] : slots_) {
    if (slot->entry) out.push_back(slot.get());
  }
  return out;
}

EntryPtr TensorQueue::acquire() {
  {
    std::lock_guard<SpinLock> lock(mu_);
    if (!free_.empty()) {
      EntryPtr e = std::move(free_.back());
      free_.pop_back();
      return e;
    }
  }
  return std::make_unique<Entry>();
}

std::vector<EntryPtr> TensorQueue::close(std::exception_ptr error) {
  std::lock_guard<SpinLock> lock(mu_);
  if (!closedWith_) closedWith_ = ErrorInfo::fromException(error);
  std::vector<EntryPtr> left;
  left.swap(queue_);
  return left;
}

void TensorQueue::throwIfClosed() const {
  std::lock_guard<SpinLock> lock(mu_);
  if (closedWith_) std::rethrow_exception(closedWith_->toException());
}

bool TensorQueue::closed() const {
  std::lock_guard<SpinLock> lock(mu_);
  return closedWith_.has_value();
}

}  // namespace hvd::engine
