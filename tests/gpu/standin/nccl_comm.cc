// Stand-in NCCL communicators over a shared-memory segment (see nccl_comm.h).
#include "nccl_comm.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include "nccl_reduce.h"
#include "standin.h"

namespace standin {

namespace {

constexpr uint32_t kReady = 0x53544E44;
constexpr size_t kSlotBytes = size_t{256} << 10;   // per rank, per collective round
constexpr size_t kMailboxArea = size_t{2} << 20;   // all ordered pairs together
constexpr size_t kMinBoxBytes = size_t{4} << 10;
constexpr auto kLivenessPeriod = std::chrono::milliseconds(20);

size_t align(size_t n, size_t a) { return (n + a - 1) / a * a; }

// The process's start time (/proc/<pid>/stat field 22), 0 when it cannot be read; with the pid
// it names a process even if the pid is reused. `state` receives the state letter.
uint64_t processStartTime(int pid, char* state) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(in, line)) return 0;
  size_t close = line.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream fields(line.substr(close + 2));
  std::string field;
  uint64_t start = 0;
  for (int i = 3; i <= 22 && fields >> field; ++i) {
    if (i == 3 && state) *state = field[0];
    if (i == 22) start = std::strtoull(field.c_str(), nullptr, 10);
  }
  return start;
}

bool processAlive(int pid, uint64_t startTime) {
  if (kill(pid, 0) != 0 && errno == ESRCH) return false;
  char state = '?';
  uint64_t start = processStartTime(pid, &state);
  if (start == 0) return false;  // gone between the two checks
  return state != 'Z' && state != 'X' && start == startTime;
}

timespec deadlineIn(std::chrono::milliseconds ms) {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  long long ns = t.tv_nsec + static_cast<long long>(ms.count()) * 1000000LL;
  t.tv_sec += ns / 1000000000LL;
  t.tv_nsec = ns % 1000000000LL;
  return t;
}

const char* kindName(int kind) {
  switch (kind) {
    case kAllReduce: return "ncclAllReduce";
    case kAllGather: return "ncclAllGather";
    case kBroadcast: return "ncclBroadcast";
    case kReduceScatter: return "ncclReduceScatter";
    default: return "?";
  }
}

std::string describeDesc(const CollectiveDesc& d) {
  std::ostringstream out;
  out << kindName(d.kind) << "(count " << d.count << ", " << ncclTypeName(static_cast<ncclDataType_t>(d.dtype));
  if (d.kind == kAllReduce || d.kind == kReduceScatter) out << ", " << ncclOpName(static_cast<ncclRedOp_t>(d.op));
  if (d.kind == kBroadcast) out << ", root " << d.root;
  out << ") as collective #" << d.index;
  return out.str();
}

bool sameDesc(const CollectiveDesc& a, const CollectiveDesc& b) {
  return a.index == b.index && a.kind == b.kind && a.count == b.count && a.dtype == b.dtype && a.op == b.op &&
         a.root == b.root;
}

int initTimeoutSeconds() {
  const char* env = std::getenv("HVD_STANDIN_NCCL_INIT_TIMEOUT");
  int value = env ? std::atoi(env) : 0;
  return value > 0 ? value : 120;
}

}  // namespace

std::string NcclCall::describe() const {
  static const char* names[] = {"ncclAllReduce",     "ncclAllGather", "ncclBroadcast",
                                "ncclReduceScatter", "ncclSend",      "ncclRecv"};
  std::ostringstream out;
  out << names[kind] << "(count " << count << ", " << ncclTypeName(dtype);
  if (kind == kAllReduce || kind == kReduceScatter) out << ", " << ncclOpName(op);
  if (kind == kBroadcast) out << ", root " << peer;
  if (kind == kSend || kind == kRecv) out << ", peer " << peer;
  out << ")";
  return out.str();
}

ncclResult_t Comm::join(const std::string& name, int nranks, int rank, int device, std::shared_ptr<Comm>* out,
                        std::string* error) {
  std::shared_ptr<Comm> c(new Comm());
  c->rank_ = rank;
  c->nranks_ = nranks;
  c->device_ = device;
  c->name_ = name;
  const size_t boxBytes = std::max(kMinBoxBytes, kMailboxArea / static_cast<size_t>(nranks * nranks) / 64 * 64);
  const size_t headerBytes = align(sizeof(SegmentHeader), 4096);
  const size_t total =
      headerBytes + static_cast<size_t>(nranks) * kSlotBytes + static_cast<size_t>(nranks * nranks) * boxBytes;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(initTimeoutSeconds());

  int fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  const bool creator = fd >= 0;
  if (!creator) {
    if (errno != EEXIST) {
      *error = "shm_open(" + name + ") failed: " + std::strerror(errno);
      return ncclSystemError;
    }
    fd = shm_open(name.c_str(), O_RDWR, 0600);
    if (fd < 0) {
      *error = "shm_open(" + name + ") failed: " + std::strerror(errno);
      return ncclSystemError;
    }
  }
  if (creator && ftruncate(fd, static_cast<off_t>(total)) != 0) {
    *error = "ftruncate of " + name + " failed: " + std::strerror(errno);
    close(fd);
    shm_unlink(name.c_str());
    return ncclSystemError;
  }
  struct stat st{};
  while (fstat(fd, &st) == 0 && st.st_size == 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  if (static_cast<size_t>(st.st_size) != total) {
    close(fd);
    *error = "the communicator's segment " + name + " has " + std::to_string(st.st_size) + " bytes, " +
             std::to_string(total) + " expected for " + std::to_string(nranks) +
             " ranks: ranks passed different nranks to ncclCommInitRank";
    return ncclInvalidArgument;
  }
  c->map_ = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (c->map_ == MAP_FAILED) {
    c->map_ = nullptr;
    *error = "mmap of " + name + " failed: " + std::strerror(errno);
    return ncclSystemError;
  }
  c->mapBytes_ = total;
  c->hdr_ = static_cast<SegmentHeader*>(c->map_);
  SegmentHeader* h = c->hdr_;
  if (creator) {
    h->nranks = nranks;
    h->slotBytes = kSlotBytes;
    h->boxBytes = boxBytes;
    h->totalBytes = total;
    pthread_mutexattr_t ma;
    pthread_mutexattr_init(&ma);
    pthread_mutexattr_setpshared(&ma, PTHREAD_PROCESS_SHARED);
    pthread_mutexattr_setrobust(&ma, PTHREAD_MUTEX_ROBUST);
    pthread_mutex_init(&h->mu, &ma);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setpshared(&ca, PTHREAD_PROCESS_SHARED);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&h->cv, &ca);
    h->ready.store(kReady, std::memory_order_release);
  }
  while (h->ready.load(std::memory_order_acquire) != kReady) {
    if (std::chrono::steady_clock::now() > deadline) {
      *error = "the communicator's segment " + name + " was never initialized by the rank that created it";
      return ncclSystemError;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (h->nranks != nranks) {
    *error = "ncclCommInitRank: nranks " + std::to_string(nranks) + " but another rank joined the same id with " +
             std::to_string(h->nranks);
    return ncclInvalidArgument;
  }

  c->lock();
  if (h->ranks[rank].joined) {
    c->unlock();
    *error = "ncclCommInitRank: rank " + std::to_string(rank) + " joined the communicator twice";
    return ncclInvalidUsage;
  }
  h->ranks[rank].pid = getpid();
  h->ranks[rank].startTime = processStartTime(getpid(), nullptr);
  h->ranks[rank].joined = 1;
  ++h->joined;
  pthread_cond_broadcast(&h->cv);
  ncclResult_t result = ncclSuccess;
  while (h->joined < nranks) {
    for (int r = 0; r < nranks && result == ncclSuccess; ++r) {
      const RankSlot& peer = h->ranks[r];
      if (r != rank && peer.joined && !processAlive(peer.pid, peer.startTime)) {
        *error = "ncclCommInitRank: rank " + std::to_string(r) + " (pid " + std::to_string(peer.pid) +
                 ") died before every rank joined";
        result = ncclSystemError;
      }
    }
    if (result == ncclSuccess && std::chrono::steady_clock::now() > deadline) {
      *error = "ncclCommInitRank: only " + std::to_string(h->joined) + " of " + std::to_string(nranks) +
               " ranks joined within HVD_STANDIN_NCCL_INIT_TIMEOUT=" + std::to_string(initTimeoutSeconds()) + " s";
      result = ncclSystemError;
    }
    if (result != ncclSuccess) break;
    timespec t = deadlineIn(kLivenessPeriod);
    if (pthread_cond_timedwait(&h->cv, &h->mu, &t) == EOWNERDEAD) pthread_mutex_consistent(&h->mu);
  }
  if (result != ncclSuccess || h->joined == nranks) {
    // Every rank has mapped it (or the communicator failed): the name is no longer needed.
    if (!h->unlinked) shm_unlink(name.c_str());
    h->unlinked = 1;
  }
  if (result != ncclSuccess) h->ranks[rank].left = 1;
  c->unlock();
  if (result == ncclSuccess) *out = std::move(c);
  return result;
}

Comm::~Comm() {
  if (map_) munmap(map_, mapBytes_);
}

void Comm::lock() {
  if (pthread_mutex_lock(&hdr_->mu) == EOWNERDEAD) pthread_mutex_consistent(&hdr_->mu);
}
void Comm::unlock() { pthread_mutex_unlock(&hdr_->mu); }

char* Comm::slot(int rank) const {
  return static_cast<char*>(map_) + align(sizeof(SegmentHeader), 4096) + static_cast<size_t>(rank) * hdr_->slotBytes;
}
char* Comm::box(int from, int to) const {
  return slot(nranks_) + static_cast<size_t>(from * nranks_ + to) * hdr_->boxBytes;
}

void Comm::setAsyncError(ncclResult_t error, const std::string& message) {
  int expected = ncclSuccess;
  if (!asyncError_.compare_exchange_strong(expected, error)) return;
  std::string line = "NCCL communicator " + name_ + ", rank " + std::to_string(rank_) + ": " + message;
  report(line);
  ncclRecordError(line);
  std::lock_guard<std::mutex> lock(mu_);
  cv_.notify_all();
}

bool Comm::issue(const std::function<bool(uint64_t)>& enqueue) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!enqueue(issued_ + 1)) return false;
  ++issued_;
  return true;
}

void Comm::abort() {
  aborted_ = true;
  lock();
  hdr_->ranks[rank_].left = 1;
  pthread_cond_broadcast(&hdr_->cv);
  unlock();
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return !running_; });
}

void Comm::leave() {
  lock();
  hdr_->ranks[rank_].left = 1;
  pthread_cond_broadcast(&hdr_->cv);
  unlock();
}

ncclResult_t Comm::drain(std::string* error) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return finished_ == issued_ || asyncError_ != ncclSuccess; });
  if (finished_ == issued_) return ncclSuccess;
  *error = "ncclCommDestroy: " + std::to_string(issued_ - finished_) +
           " queued calls cannot finish after the asynchronous error; use ncclCommAbort";
  return ncclInvalidUsage;
}

// Peers that left or died make the wait hopeless: that is the async error; the op still waits
// (NCCL's kernels spin until the communicator is aborted).
void Comm::checkPeers() {
  for (int r = 0; r < nranks_; ++r) {
    if (r == rank_ || !waitPeers_[static_cast<size_t>(r)]) continue;
    const RankSlot& peer = hdr_->ranks[r];
    if (peer.left)
      setAsyncError(ncclRemoteError, "rank " + std::to_string(r) +
                                         " destroyed or aborted its communicator while this rank waits for it");
    else if (!processAlive(peer.pid, peer.startTime))
      setAsyncError(ncclRemoteError, "rank " + std::to_string(r) + " (pid " + std::to_string(peer.pid) +
                                         ") died while this rank waits for it");
  }
}

template <typename Pred>
ncclResult_t Comm::waitLocked(Pred done) {
  auto nextCheck = std::chrono::steady_clock::now();
  for (;;) {
    if (done()) return ncclSuccess;
    if (aborted_) return ncclInvalidUsage;
    if (hdr_->failure != ncclSuccess) return static_cast<ncclResult_t>(hdr_->failure);
    if (std::chrono::steady_clock::now() >= nextCheck) {
      checkPeers();
      nextCheck = std::chrono::steady_clock::now() + kLivenessPeriod;
    }
    timespec t = deadlineIn(kLivenessPeriod);
    if (pthread_cond_timedwait(&hdr_->cv, &hdr_->mu, &t) == EOWNERDEAD) pthread_mutex_consistent(&hdr_->mu);
  }
}

ncclResult_t Comm::barrier() {
  lock();
  uint64_t generation = hdr_->barrierGeneration;
  if (++hdr_->arrived == nranks_) {
    hdr_->arrived = 0;
    ++hdr_->barrierGeneration;
    pthread_cond_broadcast(&hdr_->cv);
    unlock();
    return ncclSuccess;
  }
  ncclResult_t result = waitLocked([&] { return hdr_->barrierGeneration != generation; });
  unlock();
  return result;
}

void Comm::execute(uint64_t ticket, const std::vector<NcclCall>& calls) {
  {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return finished_ + 1 == ticket; });
    running_ = true;
  }
  if (!aborted_ && asyncError_ == ncclSuccess) {
    ncclResult_t result = run(calls);
    if (result != ncclSuccess && !aborted_)
      setAsyncError(result, calls.front().describe() + " failed: " + ncclGetErrorString(result));
  }
  std::lock_guard<std::mutex> lock(mu_);
  running_ = false;
  finished_ = ticket;
  cv_.notify_all();
}

ncclResult_t Comm::run(const std::vector<NcclCall>& calls) {
  std::vector<NcclCall> p2p;
  for (const NcclCall& call : calls) {
    if (call.kind == NcclCall::kSend || call.kind == NcclCall::kRecv) {
      p2p.push_back(call);
      continue;
    }
    if (ncclResult_t r = collective(call)) return r;
  }
  return p2p.empty() ? ncclSuccess : pointToPoint(p2p);
}

ncclResult_t Comm::collective(const NcclCall& call) {
  const size_t es = ncclTypeSize(call.dtype);
  const size_t n = static_cast<size_t>(nranks_);
  CollectiveDesc desc;
  desc.index = ++collectives_;
  desc.kind = call.kind == NcclCall::kAllReduce   ? kAllReduce
              : call.kind == NcclCall::kAllGather ? kAllGather
              : call.kind == NcclCall::kBroadcast ? kBroadcast
                                                  : kReduceScatter;
  desc.count = call.count;
  desc.dtype = call.dtype;
  desc.op = desc.kind == kAllReduce || desc.kind == kReduceScatter ? call.op : 0;
  desc.root = desc.kind == kBroadcast ? call.peer : 0;
  hdr_->ranks[rank_].posted = desc;
  waitPeers_.assign(n, true);

  const size_t slotBytes = hdr_->slotBytes;
  const size_t per = (desc.kind == kReduceScatter ? slotBytes / n : slotBytes) / es;
  const size_t rounds = std::max<size_t>(1, (call.count + per - 1) / per);
  const auto* send = static_cast<const char*>(call.send);
  auto* recv = static_cast<char*>(call.recv);
  std::vector<const void*> inputs(n);
  for (size_t k = 0; k < rounds; ++k) {
    const size_t off = k * per;
    const size_t m = std::min(per, call.count - std::min(off, call.count));
    char* mine = slot(rank_);
    switch (desc.kind) {
      case kAllReduce:
      case kAllGather: std::memcpy(mine, send + off * es, m * es); break;
      case kBroadcast:
        if (rank_ == desc.root) std::memcpy(mine, send + off * es, m * es);
        break;
      case kReduceScatter:
        for (size_t t = 0; t < n; ++t)
          std::memcpy(mine + t * (slotBytes / n), send + (t * call.count + off) * es, m * es);
        break;
    }
    if (ncclResult_t r = barrier()) return r;
    if (k == 0) {
      for (int r = 0; r < nranks_; ++r) {
        if (sameDesc(hdr_->ranks[r].posted, desc)) continue;
        setAsyncError(ncclInvalidUsage, "collective mismatch: rank " + std::to_string(rank_) + " called " +
                                            describeDesc(desc) + ", rank " + std::to_string(r) + " called " +
                                            describeDesc(hdr_->ranks[r].posted));
        return ncclInvalidUsage;
      }
    }
    switch (desc.kind) {
      case kAllReduce:
        for (size_t r = 0; r < n; ++r) inputs[r] = slot(static_cast<int>(r));
        reduceInputs(recv + off * es, inputs.data(), nranks_, m, call.dtype, call.op);
        break;
      case kAllGather:
        for (size_t r = 0; r < n; ++r)
          std::memcpy(recv + (r * call.count + off) * es, slot(static_cast<int>(r)), m * es);
        break;
      case kBroadcast: std::memcpy(recv + off * es, slot(desc.root), m * es); break;
      case kReduceScatter:
        for (size_t r = 0; r < n; ++r)
          inputs[r] = slot(static_cast<int>(r)) + static_cast<size_t>(rank_) * (slotBytes / n);
        reduceInputs(recv + off * es, inputs.data(), nranks_, m, call.dtype, call.op);
        break;
    }
    if (ncclResult_t r = barrier()) return r;
  }
  return ncclSuccess;
}

// Sends and receives of one group progress together, so any matched set completes: each ordered
// pair of ranks has a one-chunk mailbox; messages between a pair go through it in call order.
ncclResult_t Comm::pointToPoint(const std::vector<NcclCall>& calls) {
  struct Transfer {
    const NcclCall* call;
    size_t bytes;
    size_t done = 0;
    bool started = false;
    bool finished() const { return started && done == bytes; }
  };
  std::vector<Transfer> transfers;
  for (const NcclCall& c : calls) transfers.push_back({&c, c.count * ncclTypeSize(c.dtype)});
  // The first unfinished transfer of each (direction, peer) is the active one.
  auto active = [&](size_t i) {
    for (size_t j = 0; j < i; ++j)
      if (!transfers[j].finished() && transfers[j].call->kind == transfers[i].call->kind &&
          transfers[j].call->peer == transfers[i].call->peer)
        return false;
    return !transfers[i].finished();
  };
  auto ready = [&](size_t i) {
    const NcclCall& c = *transfers[i].call;
    if (c.kind == NcclCall::kSend) return !hdr_->boxes[rank_ * nranks_ + c.peer].full;
    return hdr_->boxes[c.peer * nranks_ + rank_].full != 0;
  };
  waitPeers_.assign(static_cast<size_t>(nranks_), false);
  for (const NcclCall& c : calls) waitPeers_[static_cast<size_t>(c.peer)] = true;
  const size_t boxBytes = hdr_->boxBytes;
  lock();
  for (;;) {
    bool all = true;
    bool progressed = false;
    for (size_t i = 0; i < transfers.size(); ++i) {
      Transfer& t = transfers[i];
      if (!active(i)) {
        all = all && t.finished();
        continue;
      }
      all = false;
      if (!ready(i)) continue;
      const NcclCall& c = *t.call;
      size_t chunk = std::min(boxBytes, t.bytes - t.done);
      if (c.kind == NcclCall::kSend) {
        Mailbox& b = hdr_->boxes[rank_ * nranks_ + c.peer];
        std::memcpy(box(rank_, c.peer), static_cast<const char*>(c.send) + t.done, chunk);
        b.messageBytes = t.bytes;
        b.chunkBytes = chunk;
        b.full = 1;
      } else {
        Mailbox& b = hdr_->boxes[c.peer * nranks_ + rank_];
        if (b.messageBytes != t.bytes) {
          hdr_->failure = ncclInvalidUsage;
          pthread_cond_broadcast(&hdr_->cv);
          unlock();
          setAsyncError(ncclInvalidUsage, "ncclRecv of " + std::to_string(t.bytes) + " bytes from rank " +
                                              std::to_string(c.peer) + " matched an ncclSend of " +
                                              std::to_string(b.messageBytes) + " bytes");
          return ncclInvalidUsage;
        }
        chunk = b.chunkBytes;
        std::memcpy(static_cast<char*>(c.recv) + t.done, box(c.peer, rank_), chunk);
        b.full = 0;
      }
      t.done += chunk;
      t.started = true;
      progressed = true;
    }
    if (all) break;
    if (progressed) {
      pthread_cond_broadcast(&hdr_->cv);
      continue;
    }
    ncclResult_t r = waitLocked([&] {
      for (size_t i = 0; i < transfers.size(); ++i)
        if (active(i) && ready(i)) return true;
      return false;
    });
    if (r != ncclSuccess) {
      unlock();
      return r;
    }
  }
  pthread_cond_broadcast(&hdr_->cv);
  unlock();
  return ncclSuccess;
}

}  // namespace standin
