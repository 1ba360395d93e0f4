#include "transport/shm/shm_transport.h"

#include <sched.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <new>
#include <sstream>

#include "common/check.h"
#include "common/logging.h"
#include "transport/shm/shm_space.h"

namespace hvd::shm {
namespace {

Param<int64_t> kRingBytes("HOROVOD_SHM_RING_BYTES", int64_t{1} << 20,
                          "Shared-memory transport: bytes of each inbound data ring (one per local sender); "
                          "rounded up to a power of two, at least 4096.");
Param<int64_t> kMailboxBytes("HOROVOD_SHM_MAILBOX_BYTES", int64_t{256} << 10,
                             "Shared-memory transport: bytes of each inbound control-message ring (one per local "
                             "sender); larger messages stream through it. Power of two, at least 4096.");
Param<int64_t> kSpaceBytes("HOROVOD_SHM_SPACE_BYTES", int64_t{4} << 20,
                           "Shared-memory transport: capacity of each rank's shared buffer (fusion and reduction "
                           "between local ranks), allocated on first use; used as two halves, and the "
                           "collectives pass at most 1 MiB chunks through it, so more mostly costs memory.");
Param<int64_t> kSpinUs("HOROVOD_SHM_SPIN_US", 100,
                       "Shared-memory transport: microseconds a wait polls before it sleeps (0 = sleep at once); "
                       "after HOROVOD_SHM_BUSY_SPIN_US of busy polling it yields the CPU between polls. Default "
                       "100, or 10000 when the host has more local ranks than CPUs.");
Param<int64_t> kBusySpinUs("HOROVOD_SHM_BUSY_SPIN_US", 5,
                           "Shared-memory transport: microseconds of busy polling (no yield) at the start of a wait. "
                           "Default 5, or 0 when the host has more local ranks than CPUs.");
Param<bool> kNamed("HOROVOD_SHM_NAMED", false,
                   "Shared-memory transport: use named /dev/shm segments (unlinked right after setup) instead of "
                   "anonymous memfd segments opened through /proc/<pid>/fd.");

size_t ringSize(const char* name, int64_t value) {
  if (value < 4096 || value > (int64_t{1} << 32)) {
    throw InvalidArgument(std::string(name) + "=" + std::to_string(value) + " is out of range [4096, 4 GiB]");
  }
  size_t size = 4096;
  while (size < static_cast<size_t>(value)) size <<= 1;
  return size;
}

Bytes toBytes(const std::string& text) { return Bytes(text.begin(), text.end()); }
std::string toText(const Bytes& bytes) { return std::string(bytes.begin(), bytes.end()); }

struct Registrar {
  Registrar() {
    registerTransport("shm", [](const TransportContext& context) -> std::unique_ptr<Transport> {
      return std::make_unique<ShmTransport>(context, ShmOptions::fromEnvironment());
    });
  }
} registrar;

}  // namespace

ShmOptions ShmOptions::fromEnvironment(const EnvLookup& env) {
  ShmOptions options;
  options.ringBytes = ringSize(kRingBytes.name(), kRingBytes.get(env));
  options.mailboxBytes = ringSize(kMailboxBytes.name(), kMailboxBytes.get(env));
  int64_t space = kSpaceBytes.get(env);
  if (space < 0) throw InvalidArgument(std::string(kSpaceBytes.name()) + " must not be negative");
  options.spaceBytes = static_cast<size_t>(space);
  if (kSpinUs.isSet(env)) {
    int64_t spin = kSpinUs.get(env);
    if (spin < 0) throw InvalidArgument(std::string(kSpinUs.name()) + " must not be negative");
    options.spin = std::chrono::microseconds(spin);
  }
  if (kBusySpinUs.isSet(env)) {
    int64_t busy = kBusySpinUs.get(env);
    if (busy < 0) throw InvalidArgument(std::string(kBusySpinUs.name()) + " must not be negative");
    options.busySpin = std::chrono::microseconds(busy);
  }
  options.named = kNamed.get(env);
  return options;
}

SpinDefaults defaultSpin(int localRanks, int cpus) {
  if (localRanks > cpus) return {std::chrono::microseconds(10000), std::chrono::microseconds(0)};
  return {std::chrono::microseconds(100), std::chrono::microseconds(5)};
}

int usableCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) != 0) return 1;
  return std::max(1, CPU_COUNT(&set));
}

ShmTransport::ShmTransport(const TransportContext& context, ShmOptions options)
    : rank_(context.rank), size_(context.size), jobId_(context.jobId), store_(context.store), options_(options) {
  if (size_ < 1 || rank_ < 0 || rank_ >= size_) {
    throw InvalidArgument("shm transport: rank " + std::to_string(rank_) + " of size " + std::to_string(size_));
  }
  if (size_ > 1 && !store_) throw InvalidArgument("shm transport: a store is needed for more than one rank");
  if (!context.hostOf.empty()) {
    if (static_cast<int>(context.hostOf.size()) != size_) {
      throw InvalidArgument("shm transport: hostOf has " + std::to_string(context.hostOf.size()) + " entries for " +
                            std::to_string(size_) + " ranks");
    }
    for (int r = 0; r < size_; ++r) {
      if (context.hostOf[r] != context.hostOf[0]) {
        throw InvalidArgument("shm transport needs all ranks on one host, but rank " + std::to_string(r) + " is on '" +
                              context.hostOf[r] + "' and rank 0 on '" + context.hostOf[0] + "'");
      }
    }
  }
  const SpinDefaults spin = defaultSpin(size_, usableCpus());
  if (options_.spin.count() < 0) options_.spin = spin.spin;
  if (options_.busySpin.count() < 0) options_.busySpin = spin.busySpin;
  options_.ringBytes = ringSize("ring bytes", static_cast<int64_t>(options_.ringBytes));
  options_.mailboxBytes = ringSize("mailbox bytes", static_cast<int64_t>(options_.mailboxBytes));
  // Chunks small enough that sender and receiver copy concurrently, large enough to amortise
  // the publish/notify per chunk.
  dataChunk_ = std::min<size_t>(size_t{64} << 10, options_.ringBytes / 2);
  layout_ = SegmentLayout{size_, options_.ringBytes, options_.mailboxBytes};
  connect(Deadline::after(context.timeout));
  waiter_->setStopLimit(context.timeout);
}

ShmTransport::~ShmTransport() {
  if (flusher_.joinable()) {
    {
      std::lock_guard<std::mutex> lock(flusherMutex_);
      stopping_.store(true);
    }
    flusherWork_.notify_all();
    waiter_->ringOwn();
    flusher_.join();
  }
  if (header_ != nullptr) {
    // A transport that failed or was aborted tells its peers so (every wait of theirs fails);
    // a clean close concerns only the waits that depend on this rank.
    uint32_t expected = 0;
    header_->closed.compare_exchange_strong(expected, waiter_->failed() ? kClosedFailed : kClosedClean,
                                            std::memory_order_seq_cst);
    notifyPeers();
  }
  spaces_.clear();
  waiter_.reset();
  peers_.clear();
}

void ShmTransport::connect(Deadline deadline) {
  std::vector<int> everyone(size_);
  for (int r = 0; r < size_; ++r) everyone[r] = r;
  bool named = options_.named;
  for (int round = 0;; ++round) {
    createOwnSegment(named, round);
    std::vector<Segment> segments;
    std::string problems;
    try {
      if (size_ > 1) {
        problems = exchange("shm" + std::to_string(round), everyone, own_, layout_.totalBytes(), segments, deadline);
      }
    } catch (...) {
      // A peer may have died after creating its named segment: remove every name of this
      // round, so that a failed setup leaves nothing in /dev/shm either.
      if (named) {
        for (int p = 0; p < size_; ++p) ::shm_unlink(roundSegmentName(p, round).c_str());
      }
      throw;
    }
    if (problems.empty()) {
      named_ = named;
      segments.resize(size_);
      peers_.resize(size_);
      waiter_ = std::make_unique<Waiter>(rank_, header_, options_.spin, options_.busySpin);
      for (int p = 0; p < size_; ++p) {
        if (p != rank_) attachPeer(p, std::move(segments[p]));
      }
      own_.seal();
      return;
    }
    if (named) throw Error("shm transport: ranks cannot map each other's shared memory: " + problems);
    if (rank_ == 0) {
      HVD_LOG(Warning) << "shm transport: anonymous segments cannot be shared (" << problems
                       << "); falling back to named /dev/shm segments";
    }
    named = true;
  }
}

std::string ShmTransport::roundSegmentName(int rank, int round) const {
  return segmentName(jobId_, "r" + std::to_string(rank) + (round ? "b" : ""));
}

void ShmTransport::createOwnSegment(bool named, int round) {
  own_ = Segment::create(layout_.totalBytes(), named, roundSegmentName(rank_, round));
  header_ = reinterpret_cast<SegmentHeader*>(own_.data());
  header_->pid = static_cast<int32_t>(::getpid());
  header_->rank = rank_;
  header_->size = size_;
  header_->ringBytes = options_.ringBytes;
  header_->mailboxBytes = options_.mailboxBytes;
  header_->totalBytes = layout_.totalBytes();
  header_->magic.store(kSegmentMagic, std::memory_order_release);
}

void ShmTransport::attachPeer(int p, Segment segment) {
  Peer& peer = peers_[p];
  peer.segment = std::move(segment);
  uint8_t* base = peer.segment.data();
  peer.header = reinterpret_cast<SegmentHeader*>(base);
  HVD_CHECK_EQ(peer.header->magic.load(std::memory_order_acquire), kSegmentMagic)
      << "segment of rank " << p << " is not initialised";
  HVD_CHECK(peer.header->rank == p && peer.header->size == size_ && peer.header->ringBytes == options_.ringBytes &&
            peer.header->mailboxBytes == options_.mailboxBytes)
      << "rank " << p << " uses another shared-memory layout (rank " << peer.header->rank << " of " << peer.header->size
      << ", rings " << peer.header->ringBytes << "/" << peer.header->mailboxBytes
      << " bytes); all ranks must use the same HOROVOD_SHM_* settings";
  auto control = [](uint8_t* segBase, size_t offset) { return reinterpret_cast<RingControl*>(segBase + offset); };
  int there = SegmentLayout::slotOf(p, rank_);  // our slot in the peer's segment
  int here = SegmentLayout::slotOf(rank_, p);   // the peer's slot in ours
  peer.dataOut =
      Ring(control(base, layout_.controlOffset(there, false)), base + layout_.ringOffset(there), options_.ringBytes);
  peer.mailOut = Ring(control(base, layout_.controlOffset(there, true)), base + layout_.mailboxOffset(there),
                      options_.mailboxBytes);
  uint8_t* mine = own_.data();
  peer.dataIn =
      Ring(control(mine, layout_.controlOffset(here, false)), mine + layout_.ringOffset(here), options_.ringBytes);
  peer.mailIn =
      Ring(control(mine, layout_.controlOffset(here, true)), mine + layout_.mailboxOffset(here), options_.mailboxBytes);
  waiter_->addPeer(p, peer.header, peer.header->pid);
}

std::string ShmTransport::exchange(const std::string& prefix, const std::vector<int>& members, Segment& own,
                                   size_t bytes, std::vector<Segment>& out, Deadline deadline) {
  auto key = [&](const char* what, int r) { return prefix + "/" + what + "/" + std::to_string(r); };
  store_->set(key("seg", rank_), toBytes(own.descriptor()), deadline);
  out.clear();
  out.resize(members.size());
  std::string mine;
  for (size_t i = 0; i < members.size(); ++i) {
    if (members[i] == rank_) continue;
    std::string descriptor = toText(store_->get(key("seg", members[i]), deadline));
    try {
      out[i] = Segment::open(descriptor, bytes);
    } catch (const Error& e) {
      mine += (mine.empty() ? "" : "; ") + std::string("rank ") + std::to_string(rank_) + " cannot map rank " +
              std::to_string(members[i]) + "'s segment: " + e.what();
    }
  }
  // Everyone confirms before the owners close their fds (and unlink names): after this point no
  // member needs to open anything.
  store_->set(key("ok", rank_), toBytes(mine), deadline);
  std::string all = mine;
  for (int member : members) {
    if (member == rank_) continue;
    std::string theirs = toText(store_->get(key("ok", member), deadline));
    if (!theirs.empty()) all += (all.empty() ? "" : "; ") + theirs;
  }
  own.seal();
  if (!all.empty()) out.clear();
  return all;
}

void ShmTransport::checkPeer(int peer, const char* op) const {
  if (peer < 0 || peer >= size_) {
    throw InvalidArgument(std::string("shm ") + op + ": peer " + std::to_string(peer) + " out of range [0, " +
                          std::to_string(size_) + ")");
  }
}

// ---- Data plane ---------------------------------------------------------------------------

void ShmTransport::send(int peer, const void* data, size_t bytes, Deadline deadline) {
  checkPeer(peer, "send");
  transfer(peer, data, bytes, peer, nullptr, 0, deadline, "send");
}

void ShmTransport::recv(int peer, void* data, size_t bytes, Deadline deadline) {
  checkPeer(peer, "recv");
  transfer(peer, nullptr, 0, peer, data, bytes, deadline, "recv");
}

void ShmTransport::sendRecv(int to, const void* sendData, size_t sendBytes, int from, void* recvData, size_t recvBytes,
                            Deadline deadline) {
  checkPeer(to, "sendRecv");
  checkPeer(from, "sendRecv");
  transfer(to, sendData, sendBytes, from, recvData, recvBytes, deadline, "sendRecv");
}

void ShmTransport::transfer(int to, const void* sendData, size_t sendBytes, int from, void* recvData, size_t recvBytes,
                            Deadline deadline, const char* op) {
  waiter_->throwIfFailed();
  auto src = static_cast<const uint8_t*>(sendData);
  auto dst = static_cast<uint8_t*>(recvData);
  size_t sendLeft = sendBytes, recvLeft = recvBytes;
  if (sendLeft > 0 && to == rank_) {
    selfData_.insert(selfData_.end(), src, src + sendLeft);
    sendLeft = 0;
  }
  if (recvLeft > 0 && from == rank_) {
    size_t have = selfData_.size() - selfDataRead_;
    if (have < recvLeft) {
      throw Error("shm " + std::string(op) + " on rank " + std::to_string(rank_) + ": receiving " +
                  std::to_string(recvLeft) + " bytes from itself, but only " + std::to_string(have) +
                  " were sent to itself");
    }
    std::memcpy(dst, selfData_.data() + selfDataRead_, recvLeft);
    selfDataRead_ += recvLeft;
    if (selfDataRead_ == selfData_.size()) {
      selfData_.clear();
      selfDataRead_ = 0;
    }
    recvLeft = 0;
  }
  Peer* out = sendLeft > 0 ? &peers_[to] : nullptr;
  Peer* in = recvLeft > 0 ? &peers_[from] : nullptr;
  while (sendLeft > 0 || recvLeft > 0) {
    bool progress = false;
    if (sendLeft > 0) {
      size_t n = out->dataOut.write(src, sendLeft, dataChunk_);
      if (n > 0) {
        src += n;
        sendLeft -= n;
        Waiter::notify(out->header);
        progress = true;
      }
    }
    if (recvLeft > 0) {
      size_t n = in->dataIn.read(dst, std::min(recvLeft, dataChunk_));
      if (n > 0) {
        dst += n;
        recvLeft -= n;
        Waiter::notify(in->header);  // the sender may wait for space
        progress = true;
      }
    }
    if (progress) continue;
    waitOrTimeout(
        [&] { return (sendLeft > 0 && out->dataOut.writable()) || (recvLeft > 0 && in->dataIn.readable()); }, deadline,
        [&] {
          std::ostringstream text;
          text << "shm " << op << " on rank " << rank_ << " timed out:";
          if (sendLeft > 0) text << " sent " << sendBytes - sendLeft << " of " << sendBytes << " bytes to rank " << to;
          if (sendLeft > 0 && recvLeft > 0) text << ",";
          if (recvLeft > 0) {
            text << " received " << recvBytes - recvLeft << " of " << recvBytes << " bytes from rank " << from;
          }
          return text.str();
        },
        [&](int peer) { return (sendLeft > 0 && peer == to) || (recvLeft > 0 && peer == from); },
        // Data not arriving is the sender's silence; a full ring, the receiver's.
        recvLeft > 0 ? from : to);
  }
}

// ---- Shared space -------------------------------------------------------------------------

SharedSpace* ShmTransport::sharedSpace(const std::vector<int>& ranks, Deadline deadline) {
  waiter_->throwIfFailed();
  bool sorted =
      std::is_sorted(ranks.begin(), ranks.end()) && std::adjacent_find(ranks.begin(), ranks.end()) == ranks.end();
  bool member = std::find(ranks.begin(), ranks.end(), rank_) != ranks.end();
  if (ranks.empty() || !sorted || !member || ranks.front() < 0 || ranks.back() >= size_) {
    std::ostringstream text;
    text << "shm sharedSpace: ranks must be ascending, distinct, in [0, " << size_ << ") and include rank " << rank_
         << "; got [";
    for (size_t i = 0; i < ranks.size(); ++i) text << (i ? "," : "") << ranks[i];
    throw InvalidArgument(text.str() + "]");
  }
  std::lock_guard<std::mutex> lock(spaceMutex_);
  auto it = spaces_.find(ranks);
  if (it != spaces_.end()) return it->second.get();

  std::string list;
  for (int r : ranks) list += (list.empty() ? "" : ",") + std::to_string(r);
  // Store keys and segment names identify the member list; the name needs a short form.
  uint64_t hash = 1469598103934665603ULL;
  for (unsigned char c : list) hash = (hash ^ c) * 1099511628211ULL;
  const size_t bytes = kPage + roundUp(options_.spaceBytes, kPage);
  auto nameOf = [&](int member) {
    return segmentName(jobId_, "s" + std::to_string(hash % 1000000007ULL) + "-" + std::to_string(member));
  };
  Segment own = Segment::create(bytes, named_, nameOf(rank_));
  auto* header = reinterpret_cast<SpaceHeader*>(own.data());
  header->pid = static_cast<int32_t>(::getpid());
  header->rank = rank_;
  header->capacity = options_.spaceBytes;
  header->magic.store(kSpaceMagic, std::memory_order_release);
  std::vector<Segment> buffers;
  if (ranks.size() > 1) {
    std::string problems;
    try {
      problems = exchange("space/" + list, ranks, own, bytes, buffers, deadline);
    } catch (...) {
      if (named_) {
        for (int member : ranks) ::shm_unlink(nameOf(member).c_str());  // see connect()
      }
      throw;
    }
    if (!problems.empty()) throw Error("shm sharedSpace: members cannot map each other's buffers: " + problems);
  } else {
    own.seal();
    buffers.resize(1);
  }
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (ranks[i] == rank_) buffers[i] = std::move(own);
  }
  auto space = std::make_unique<ShmSpace>(*this, ranks, std::move(buffers), options_.spaceBytes);
  SharedSpace* result = space.get();
  spaces_.emplace(ranks, std::move(space));
  return result;
}

// ---- Control plane ------------------------------------------------------------------------

void ShmTransport::post(int peer, const void* data, size_t bytes) {
  checkPeer(peer, "post");
  waiter_->throwIfFailed();
  auto src = static_cast<const uint8_t*>(data);
  if (peer == rank_) {
    {
      std::lock_guard<std::mutex> lock(selfMutex_);
      selfMessages_.emplace_back(src, src + bytes);
      selfMessageCount_.fetch_add(1, std::memory_order_release);
    }
    waiter_->ringOwn();
    return;
  }
  Peer& p = peers_[peer];
  uint8_t length[8];
  uint64_t value = bytes;
  std::memcpy(length, &value, sizeof length);
  std::lock_guard<std::mutex> lock(outboxMutex_);
  bool queued = p.outboxSent < p.outbox.size();
  if (queued) {
    flushOutbox(p);
    queued = p.outboxSent < p.outbox.size();
  }
  size_t lengthSent = 0, dataSent = 0;
  if (!queued) {
    lengthSent = p.mailOut.write(length, sizeof length, SIZE_MAX);
    if (lengthSent == sizeof length) dataSent = p.mailOut.write(src, bytes, SIZE_MAX);
    if (lengthSent > 0) Waiter::notify(p.header);
  }
  if (lengthSent < sizeof length || dataSent < bytes) {
    p.outbox.insert(p.outbox.end(), length + lengthSent, length + sizeof length);
    p.outbox.insert(p.outbox.end(), src + dataSent, src + bytes);
    if (!queued) {
      outboxesPending_.fetch_add(1, std::memory_order_relaxed);
      std::lock_guard<std::mutex> flusherLock(flusherMutex_);
      if (!flusher_.joinable()) flusher_ = std::thread([this] { flusherLoop(); });
      flusherWork_.notify_one();
    }
  }
}

void ShmTransport::flusherLoop() {
  std::unique_lock<std::mutex> lock(flusherMutex_);
  for (;;) {
    flusherWork_.wait(lock, [&] { return stopping_.load() || outboxesPending_.load() > 0; });
    if (stopping_.load()) return;
    lock.unlock();
    try {
      // Sleeps until receivers free mailbox space (they ring our bell when they read).
      waiter_->waitWithoutSpin(
          [&] {
            flushOutboxes();
            return outboxesPending_.load() == 0 || stopping_.load();
          },
          Deadline::never());
    } catch (const std::exception&) {
      return;  // the failure is latched; every later call of this rank reports it
    }
    lock.lock();
  }
}

bool ShmTransport::flushOutbox(Peer& p) {
  size_t left = p.outbox.size() - p.outboxSent;
  if (left == 0) return false;
  size_t n = p.mailOut.write(p.outbox.data() + p.outboxSent, left, SIZE_MAX);
  if (n == 0) return false;
  p.outboxSent += n;
  Waiter::notify(p.header);
  if (p.outboxSent == p.outbox.size()) {
    p.outbox.clear();
    p.outboxSent = 0;
    outboxesPending_.fetch_sub(1, std::memory_order_relaxed);
  } else if (p.outboxSent >= (size_t{1} << 20) && p.outboxSent * 2 >= p.outbox.size()) {
    p.outbox.erase(p.outbox.begin(), p.outbox.begin() + static_cast<std::ptrdiff_t>(p.outboxSent));
    p.outboxSent = 0;
  }
  return true;
}

void ShmTransport::flushOutboxesSlow() {
  std::unique_lock<std::mutex> lock(outboxMutex_, std::try_to_lock);
  if (!lock.owns_lock()) return;  // the holder is posting or flushing right now
  for (int p = 0; p < size_; ++p) {
    if (p != rank_) flushOutbox(peers_[p]);
  }
}

std::optional<MailboxMessage> ShmTransport::pollPeer(int from) {
  Peer& p = peers_[from];
  bool consumed = false;
  std::optional<std::vector<uint8_t>> bytes;
  try {
    bytes = p.mailReader.poll(p.mailIn, consumed);
  } catch (const MailboxCorrupt& e) {
    throw PeerLost(from, "Horovod rank " + std::to_string(from) + " " + e.what());
  }
  if (consumed) Waiter::notify(p.header);  // its outbox may be waiting for the space
  if (!bytes) return std::nullopt;
  MailboxMessage message;
  message.from = from;
  message.bytes = std::move(*bytes);
  return message;
}

std::optional<MailboxMessage> ShmTransport::poll() {
  flushOutboxes();
  if (selfMessageCount_.load(std::memory_order_acquire) > 0) {
    std::lock_guard<std::mutex> lock(selfMutex_);
    MailboxMessage message;
    message.from = rank_;
    message.bytes = std::move(selfMessages_.front());
    selfMessages_.pop_front();
    selfMessageCount_.fetch_sub(1, std::memory_order_relaxed);
    return message;
  }
  for (int k = 0; k < size_; ++k) {
    int from = (pollNext_ + k) % size_;
    if (from == rank_) continue;
    if (auto message = pollPeer(from)) {
      pollNext_ = (from + 1) % size_;
      return message;
    }
  }
  return std::nullopt;
}

bool ShmTransport::messageMaybeReady() {
  if (wakePending_.load(std::memory_order_relaxed) && wakePending_.exchange(false, std::memory_order_acq_rel)) {
    return true;
  }
  if (selfMessageCount_.load(std::memory_order_acquire) > 0) return true;
  for (int p = 0; p < size_; ++p) {
    if (p != rank_ && peers_[p].mailIn.readable()) return true;
  }
  return false;
}

bool ShmTransport::waitForMessage(Deadline deadline) {
  waiter_->throwIfFailed();
  return waiter_->wait(
      [&] {
        flushOutboxes();
        return messageMaybeReady();
      },
      // A peer that shut down cleanly has nothing more to say; only a crash fails this wait.
      deadline, [](int) { return false; });
}

void ShmTransport::wake() {
  wakePending_.store(true, std::memory_order_release);
  waiter_->ringOwn();
}

void ShmTransport::abort(const std::string& reason) {
  waiter_->abort(reason);
  // Local peers blocked on this rank (or in a barrier with it) fail now, not at their timeout.
  if (header_ != nullptr) {
    header_->closed.store(kClosedFailed, std::memory_order_seq_cst);
    notifyPeers();
  }
}

void ShmTransport::notifyPeers() {
  for (int p = 0; p < size_; ++p) {
    if (p != rank_ && peers_[p].header != nullptr) Waiter::notify(peers_[p].header);
  }
}

}  // namespace hvd::shm
