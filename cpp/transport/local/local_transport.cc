#include "transport/local/local_transport.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <thread>
#include <utility>

#include "common/check.h"
#include "transport/local/local_hub.h"
#include "transport/peer_memory.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define HVD_CPU_RELAX() _mm_pause()
#else
#define HVD_CPU_RELAX() ((void)0)
#endif

namespace hvd {

namespace {

std::string rankText(int rank) { return "rank " + std::to_string(rank); }

[[noreturn]] void throwTimeout(const char* what, int self, int peer, Deadline deadline) {
  throw Timeout(std::string("local transport: ") + what + " on " + rankText(self) +
                (peer >= 0 ? " waiting for " + rankText(peer) : std::string()) + " passed its deadline");
}

// Waits on cv until notified or the deadline; true when the deadline passed. A never() deadline
// waits untimed (time_point::max() overflows clock conversions).
template <typename Lock>
bool waitTimedOut(std::condition_variable& cv, Lock& lock, Deadline deadline) {
  if (deadline.isNever()) {
    cv.wait(lock);
    return false;
  }
  return cv.wait_until(lock, deadline.at()) == std::cv_status::timeout;
}

}  // namespace

// One member's view of a LocalSharedGroup.
class LocalSharedSpace : public SharedSpace {
 public:
  LocalSharedSpace(std::shared_ptr<LocalHub> hub, std::shared_ptr<LocalSharedGroup> group, int rank)
      : hub_(std::move(hub)), group_(std::move(group)), rank_(rank) {
    auto it = std::find(group_->members.begin(), group_->members.end(), rank);
    index_ = static_cast<int>(it - group_->members.begin());
  }
  const std::vector<int>& members() const override { return group_->members; }
  int memberIndex() const override { return index_; }
  size_t capacity() const override { return group_->capacity; }
  void* buffer(int memberIndex) override { return group_->buffers.at(memberIndex).get(); }

  void barrier(Deadline deadline) override {
    LocalSharedGroup& g = *group_;
    const int n = static_cast<int>(g.members.size());
    checkFailures();
    uint64_t gen = g.generation.load(std::memory_order_acquire);
    {
      std::lock_guard<std::mutex> lock(g.mutex);
      if (++g.arrived == n) {
        g.arrived = 0;
        g.generation.store(gen + 1, std::memory_order_release);
        g.cv.notify_all();
        return;
      }
    }
    // Spin briefly (peers usually arrive within microseconds), then block.
    for (int i = 0; i < 256; ++i) {
      if (g.generation.load(std::memory_order_acquire) != gen) return;
      HVD_CPU_RELAX();
    }
    std::unique_lock<std::mutex> lock(g.mutex);
    while (g.generation.load(std::memory_order_acquire) == gen) {
      checkFailures();
      if (waitTimedOut(g.cv, lock, deadline) && g.generation.load(std::memory_order_acquire) == gen) {
        throwTimeout("shared-space barrier", rank_, -1, deadline);
      }
    }
  }

  void publish(uint64_t value) override {
    LocalSharedGroup& g = *group_;
    g.published[index_].store(value, std::memory_order_release);
    std::lock_guard<std::mutex> lock(g.mutex);  // a waiter checks under it before it sleeps
    g.cv.notify_all();
  }

  void awaitPublished(int memberIndex, uint64_t value, Deadline deadline) override {
    LocalSharedGroup& g = *group_;
    HVD_CHECK(memberIndex >= 0 && memberIndex < static_cast<int>(g.members.size()))
        << "member index " << memberIndex << " out of range";
    std::atomic<uint64_t>& published = g.published[memberIndex];
    for (int i = 0; i < 256; ++i) {
      if (published.load(std::memory_order_acquire) >= value) return;
      HVD_CPU_RELAX();
    }
    std::unique_lock<std::mutex> lock(g.mutex);
    while (published.load(std::memory_order_acquire) < value) {
      checkFailures();
      if (waitTimedOut(g.cv, lock, deadline) && published.load(std::memory_order_acquire) < value) {
        throwTimeout("shared-space progress flag", rank_, g.members[memberIndex], deadline);
      }
    }
  }

 private:
  void checkFailures() {
    LocalRankState& self = hub_->rank(rank_);
    if (self.aborted.load()) throw Aborted("local transport aborted: " + self.abortReason);
    for (int member : group_->members) {
      if (member == rank_) continue;
      LocalRankState& peer = hub_->rank(member);
      if (peer.aborted.load() || peer.departed.load()) {
        throw PeerLost(member, "local transport: " + rankText(member) + " is gone (shared-space barrier on " +
                                   rankText(rank_) + ")");
      }
    }
  }

  std::shared_ptr<LocalHub> hub_;
  std::shared_ptr<LocalSharedGroup> group_;
  int rank_;
  int index_ = -1;
};

LocalTransport::LocalTransport(const std::string& jobId, int rank, int size, LocalTransportOptions options)
    : rank_(rank), size_(size), options_(options), hub_(LocalHub::attach(jobId, rank, size)) {
  Deadline deadline = Deadline::after(options_.connectTimeout);
  std::unique_lock<std::mutex> lock(hub_->mutex);
  if (hub_->attached == size_) {
    for (int r = 0; r < size_; ++r) hub_->rank(r).cv.notify_all();
    return;
  }
  LocalRankState& self = hub_->rank(rank_);
  while (hub_->attached < size_) {
    if (waitTimedOut(self.cv, lock, deadline) && hub_->attached < size_) {
      std::string missing;
      for (int r = 0; r < size_; ++r) {
        if (!hub_->rank(r).present && !hub_->rank(r).departed.load()) missing += " " + std::to_string(r);
      }
      self.present = false;
      self.departed.store(true);
      throw Timeout("local transport: job '" + jobId + "' rank " + std::to_string(rank_) +
                    " timed out waiting for ranks" + missing + " to attach");
    }
  }
}

LocalTransport::~LocalTransport() {
  spaces_.clear();
  {
    std::lock_guard<std::mutex> lock(hub_->mutex);
    LocalRankState& self = hub_->rank(rank_);
    self.present = false;
    self.departed.store(true);
  }
  hub_->notifyAll();
}

void LocalTransport::checkPeer(int peer) const {
  HVD_CHECK_AS(InvalidArgument, peer >= 0 && peer < size_) << "local transport: bad peer " << peer;
}

void LocalTransport::send(int peer, const void* data, size_t bytes, Deadline deadline) {
  checkPeer(peer);
  std::unique_lock<std::mutex> lock(hub_->mutex);
  LocalRankState& self = hub_->rank(rank_);
  if (self.aborted.load()) throw Aborted("local transport aborted: " + self.abortReason);
  if (bytes == 0) return;  // nothing to deliver; a finished peer is not an error
  LocalRankState& target = hub_->rank(peer);
  if (target.aborted.load() || target.departed.load()) {
    throw PeerLost(peer, "local transport: " + rankText(peer) + " is gone (send from " + rankText(rank_) + ")");
  }
  LocalStream& stream = hub_->stream(rank_, peer);
  LocalChunk chunk;
  for (size_t i = 0; i < stream.spare.size(); ++i) {
    if (stream.spare[i].capacity >= bytes) {
      chunk = std::move(stream.spare[i]);
      stream.spare.erase(stream.spare.begin() + static_cast<long>(i));
      break;
    }
  }
  lock.unlock();
  if (!chunk.data) {
    chunk.data.reset(new uint8_t[bytes]);
    chunk.capacity = bytes;
  }
  chunk.size = bytes;
  std::memcpy(chunk.data.get(), data, bytes);
  lock.lock();
  stream.chunks.push_back(std::move(chunk));
  target.cv.notify_all();
}

void LocalTransport::recv(int peer, void* data, size_t bytes, Deadline deadline) {
  checkPeer(peer);
  auto* out = static_cast<uint8_t*>(data);
  size_t got = 0;
  std::unique_lock<std::mutex> lock(hub_->mutex);
  LocalRankState& self = hub_->rank(rank_);
  LocalStream& stream = hub_->stream(peer, rank_);
  while (got < bytes) {
    if (self.aborted.load()) throw Aborted("local transport aborted: " + self.abortReason);
    if (!stream.chunks.empty()) {
      // Only this thread consumes the stream, and deque::push_back keeps references valid, so
      // the copy can run unlocked.
      LocalChunk& front = stream.chunks.front();
      size_t n = std::min(front.size - stream.offset, bytes - got);
      const uint8_t* src = front.data.get() + stream.offset;
      lock.unlock();
      std::memcpy(out + got, src, n);
      lock.lock();
      got += n;
      stream.offset += n;
      if (stream.offset == front.size) {
        LocalChunk done = std::move(front);
        stream.chunks.pop_front();
        stream.offset = 0;
        if (stream.spare.size() < 4) stream.spare.push_back(std::move(done));
      }
      continue;
    }
    LocalRankState& source = hub_->rank(peer);
    if (source.aborted.load() || source.departed.load()) {
      throw PeerLost(peer, "local transport: " + rankText(peer) + " is gone (recv on " + rankText(rank_) + ")");
    }
    int failed = hub_->failedRank(rank_);
    if (failed >= 0) {
      throw PeerLost(failed, "local transport: " + rankText(failed) + " aborted (recv on " + rankText(rank_) + ")",
                     /*peerAborted=*/true);
    }
    if (waitTimedOut(self.cv, lock, deadline) && stream.chunks.empty()) {
      throwTimeout("recv", rank_, peer, deadline);
    }
  }
}

void LocalTransport::sendRecv(int to, const void* sendData, size_t sendBytes, int from, void* recvData,
                              size_t recvBytes, Deadline deadline) {
  // Streams are unbounded, so the send completes without the peer; then receive.
  send(to, sendData, sendBytes, deadline);
  recv(from, recvData, recvBytes, deadline);
}

namespace {

// Peers are threads of this process: their buffers need no mapping.
class SameProcessMemory final : public PeerMemory {
 public:
  uint8_t* map(const SharedBufferInfo& info, std::shared_ptr<void>& hold) override {
    if (info.owner != static_cast<int64_t>(::getpid())) {
      throw Error("local transport: a shared buffer of process " + std::to_string(info.owner) +
                  " cannot be mapped here");
    }
    hold.reset();
    return info.base;
  }
};

}  // namespace

PeerMemory* LocalTransport::peerMemory() {
  static SameProcessMemory memory;  // stateless
  return options_.sharedMemory ? &memory : nullptr;
}

SharedSpace* LocalTransport::sharedSpace(const std::vector<int>& ranks, Deadline deadline) {
  if (!options_.sharedMemory) return nullptr;
  HVD_CHECK_AS(InvalidArgument, std::is_sorted(ranks.begin(), ranks.end()) &&
                                    std::find(ranks.begin(), ranks.end(), rank_) != ranks.end())
      << "local transport: sharedSpace members must be ascending and include rank " << rank_;
  for (auto& space : spaces_) {
    if (space->members() == ranks) return space.get();
  }
  for (int r : ranks) checkPeer(r);
  auto group = hub_->sharedGroup(ranks, options_.sharedCapacity);
  spaces_.push_back(std::make_unique<LocalSharedSpace>(hub_, std::move(group), rank_));
  return spaces_.back().get();
}

void LocalTransport::post(int peer, const void* data, size_t bytes) {
  checkPeer(peer);
  MailboxMessage message;
  message.from = rank_;
  message.bytes.assign(static_cast<const uint8_t*>(data), static_cast<const uint8_t*>(data) + bytes);
  std::lock_guard<std::mutex> lock(hub_->mutex);
  LocalRankState& self = hub_->rank(rank_);
  if (self.aborted.load()) throw Aborted("local transport aborted: " + self.abortReason);
  LocalRankState& target = hub_->rank(peer);
  if (target.aborted.load() || target.departed.load()) {
    throw PeerLost(peer, "local transport: " + rankText(peer) + " is gone (post from " + rankText(rank_) + ")");
  }
  target.mailbox.push_back(std::move(message));
  target.cv.notify_all();
}

std::optional<MailboxMessage> LocalTransport::poll() {
  std::lock_guard<std::mutex> lock(hub_->mutex);
  LocalRankState& self = hub_->rank(rank_);
  if (self.mailbox.empty()) return std::nullopt;
  MailboxMessage message = std::move(self.mailbox.front());
  self.mailbox.pop_front();
  return message;
}

bool LocalTransport::waitForMessage(Deadline deadline) {
  std::unique_lock<std::mutex> lock(hub_->mutex);
  LocalRankState& self = hub_->rank(rank_);
  while (true) {
    if (self.aborted.load()) throw Aborted("local transport aborted: " + self.abortReason);
    if (!self.mailbox.empty()) return true;
    if (self.woken) {
      self.woken = false;
      return true;
    }
    int failed = hub_->failedRank(rank_);
    if (failed >= 0) {
      throw PeerLost(failed, "local transport: " + rankText(failed) + " aborted (mailbox of " + rankText(rank_) + ")",
                     /*peerAborted=*/true);
    }
    if (waitTimedOut(self.cv, lock, deadline)) {
      return !self.mailbox.empty() || std::exchange(self.woken, false);
    }
  }
}

void LocalTransport::wake() {
  std::lock_guard<std::mutex> lock(hub_->mutex);
  LocalRankState& self = hub_->rank(rank_);
  self.woken = true;
  self.cv.notify_all();
}

void LocalTransport::abort(const std::string& reason) {
  {
    std::lock_guard<std::mutex> lock(hub_->mutex);
    LocalRankState& self = hub_->rank(rank_);
    if (self.aborted.load()) return;
    self.abortReason = reason;
    self.aborted.store(true, std::memory_order_release);
  }
  hub_->notifyAll();
}

namespace {

// Registers "local": every rank of the job must be a thread of this process.
const bool kRegistered = [] {
  registerTransport("local", [](const TransportContext& context) -> std::unique_ptr<Transport> {
    LocalTransportOptions options;
    options.connectTimeout = context.timeout;
    return std::make_unique<LocalTransport>(context.jobId, context.rank, context.size, options);
  });
  return true;
}();

}  // namespace
}  // namespace hvd
