#include "engine/tensor_queue.h"

namespace hvd::engine {

namespace {
// Released entries kept for reuse: enough for a large model's gradients in flight at once.
constexpr size_t kMaxFreeEntries = 4096;

const char kDuplicateName[] =
    "Requested to allreduce, allgather, or broadcast a tensor with the same name as another tensor that is "
    "currently being processed.  If you want to request another tensor, use a different tensor name.";
}  // namespace

void TensorQueue::push(std::vector<EntryPtr>& entries) {
  std::lock_guard<SpinLock> lock(mu_);
  if (closedWith_) std::rethrow_exception(closedWith_);
  for (size_t i = 0; i < entries.size(); ++i) {
    const Request& r = entries[i]->request;
    bool duplicate = pending_.find(NameKeyRef{r.processSet, r.name}) != pending_.end();
    for (size_t j = 0; j < i && !duplicate; ++j) {
      duplicate = entries[j]->request.processSet == r.processSet && entries[j]->request.name == r.name;
    }
    if (duplicate) throw InvalidArgument(kDuplicateName);
  }
  for (auto& e : entries) {
    pending_.insert(NameKeyRef{e->request.processSet, e->request.name});
    queue_.push_back(std::move(e));
  }
  pushes_.fetch_add(entries.size(), std::memory_order_release);
  entries.clear();
}

void TensorQueue::push(EntryPtr& entry) {
  const Request& r = entry->request;
  std::lock_guard<SpinLock> lock(mu_);
  if (closedWith_) std::rethrow_exception(closedWith_);
  if (!pending_.insert(NameKeyRef{r.processSet, r.name}).second) throw InvalidArgument(kDuplicateName);
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

void TensorQueue::release(int32_t processSet, const std::string& name) {
  std::lock_guard<SpinLock> lock(mu_);
  auto it = pending_.find(NameKeyRef{processSet, name});
  if (it != pending_.end()) pending_.erase(it);
}

void TensorQueue::release(EntryPtr entry) {
  Request& r = entry->request;
  std::lock_guard<SpinLock> lock(mu_);
  auto it = pending_.find(NameKeyRef{r.processSet, r.name});
  if (it != pending_.end()) pending_.erase(it);
  if (free_.size() >= kMaxFreeEntries) return;
  Entry fresh;  // every field cleared; the name and shape keep their allocations
  fresh.request.name = std::move(r.name);
  fresh.request.name.clear();
  fresh.request.shape = std::move(r.shape);
  fresh.request.shape.clear();
  *entry = std::move(fresh);
  free_.push_back(std::move(entry));
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
  if (!closedWith_) closedWith_ = error;
  std::vector<EntryPtr> left;
  left.swap(queue_);
  pending_.clear();
  return left;
}

void TensorQueue::throwIfClosed() const {
  std::lock_guard<SpinLock> lock(mu_);
  if (closedWith_) std::rethrow_exception(closedWith_);
}

bool TensorQueue::closed() const {
  std::lock_guard<SpinLock> lock(mu_);
  return closedWith_ != nullptr;
}

}  // namespace hvd::engine
