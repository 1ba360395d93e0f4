#include "transport/composite.h"

#include <algorithm>
#include <cctype>

#include "common/check.h"
#include "common/logging.h"
#include "horovod/errors.h"

namespace hvd {
namespace {

const bool kRegistered = [] {
  registerTransport("shm+tcp", [](const TransportContext& context) -> std::unique_ptr<Transport> {
    return std::make_unique<CompositeTransport>(context);
  });
  return true;
}();

}  // namespace

// A SharedSpace of the local sub-transport, seen with global rank numbers.
class CompositeTransport::SpaceView : public SharedSpace {
 public:
  SpaceView(CompositeTransport* owner, SharedSpace* inner, std::vector<int> members)
      : owner_(owner), inner_(inner), members_(std::move(members)) {}
  const std::vector<int>& members() const override { return members_; }
  int memberIndex() const override { return inner_->memberIndex(); }
  size_t capacity() const override { return inner_->capacity(); }
  void* buffer(int memberIndex) override { return inner_->buffer(memberIndex); }
  void barrier(Deadline deadline) override {
    owner_->guarded(true, [&] { inner_->barrier(deadline); });
  }
  void publish(uint64_t value) override {
    owner_->guarded(true, [&] { inner_->publish(value); });
  }
  void awaitPublished(int memberIndex, uint64_t value, Deadline deadline) override {
    owner_->guarded(true, [&] { inner_->awaitPublished(memberIndex, value, deadline); });
  }

 private:
  CompositeTransport* owner_;
  SharedSpace* inner_;
  std::vector<int> members_;
};

CompositeTransport::CompositeTransport(const TransportContext& context, const std::string& localBackend,
                                       const std::string& remoteBackend)
    : rank_(context.rank), size_(context.size), hostOf_(context.hostOf) {
  (void)kRegistered;
  HVD_CHECK_AS(InvalidArgument, size_ >= 1 && rank_ >= 0 && rank_ < size_) << "bad rank " << rank_ << " of " << size_;
  if (hostOf_.empty()) hostOf_.assign(size_, "localhost");
  HVD_CHECK_AS(InvalidArgument, static_cast<int>(hostOf_.size()) == size_)
      << "hostOf has " << hostOf_.size() << " entries for " << size_ << " ranks";
  HVD_CHECK_AS(InvalidArgument, context.store != nullptr) << "composite transport needs a store";

  // Hosts numbered in order of first appearance: names the per-host store prefix and jobId.
  std::vector<std::string> hosts;
  for (const auto& h : hostOf_) {
    if (std::find(hosts.begin(), hosts.end(), h) == hosts.end()) hosts.push_back(h);
  }
  int hostIndex = static_cast<int>(std::find(hosts.begin(), hosts.end(), hostOf_[rank_]) - hosts.begin());
  localIndex_.assign(size_, -1);
  for (int r = 0; r < size_; ++r) {
    if (hostOf_[r] == hostOf_[rank_]) {
      localIndex_[r] = static_cast<int>(localRanks_.size());
      localRanks_.push_back(r);
    }
  }

  if (localRanks_.size() > 1 && hasTransport(localBackend)) {
    TransportContext sub = context;
    sub.rank = localIndex_[rank_];
    sub.size = static_cast<int>(localRanks_.size());
    sub.hostOf.assign(sub.size, hostOf_[rank_]);
    sub.store = std::make_shared<PrefixStore>("local" + std::to_string(hostIndex), context.store);
    sub.jobId = context.jobId + ".host" + std::to_string(hostIndex);
    local_ = makeTransport(localBackend, sub);
  } else if (localRanks_.size() > 1) {
    HVD_LOG(Info) << "Transport '" << localBackend << "' is not available; ranks on host " << hostOf_[rank_]
                  << " talk over '" << remoteBackend << "'";
  }
  TransportContext remote = context;
  remote.hostOf = hostOf_;
  remote.store = std::make_shared<PrefixStore>("remote", context.store);
  remote_ = makeTransport(remoteBackend, remote);
}

CompositeTransport::~CompositeTransport() {
  {
    std::lock_guard<std::mutex> lock(helperMu_);
    stopHelper_ = true;
  }
  helperCv_.notify_all();
  if (helper_.joinable()) helper_.join();
  spaces_.clear();
  remote_.reset();
  local_.reset();
}

void CompositeTransport::checkPeer(int peer) const {
  HVD_CHECK_AS(InvalidArgument, peer >= 0 && peer < size_)
      << "peer rank " << peer << " out of range [0, " << size_ << ")";
}

void CompositeTransport::checkUsable() {
  std::lock_guard<std::mutex> lock(failMu_);
  if (failure_) std::rethrow_exception(failure_);
}

std::string CompositeTransport::globalize(const std::string& message) const {
  // The local sub-transport numbers ranks within the host: rewrite every "rank <n>".
  std::string out;
  size_t i = 0;
  const std::string word = "rank ";
  while (i < message.size()) {
    size_t at = message.find(word, i);
    if (at == std::string::npos) {
      out += message.substr(i);
      break;
    }
    size_t digits = at + word.size();
    size_t end = digits;
    while (end < message.size() && std::isdigit(static_cast<unsigned char>(message[end]))) ++end;
    out += message.substr(i, digits - i);
    if (end > digits && end - digits < 9) {
      int local = std::stoi(message.substr(digits, end - digits));
      if (local >= 0 && local < static_cast<int>(localRanks_.size())) {
        int global = localRanks_[local];
        out += std::to_string(global) + " (host " + hostOf_[global] + ")";
      } else {
        out += message.substr(digits, end - digits);
      }
    }
    i = end;
  }
  return out;
}

std::exception_ptr CompositeTransport::translate(std::exception_ptr error, bool viaLocal) {
  std::exception_ptr translated = error;
  try {
    std::rethrow_exception(error);
  } catch (const PeerLost& e) {
    if (viaLocal) {
      int global = e.rank() >= 0 && e.rank() < static_cast<int>(localRanks_.size()) ? localRanks_[e.rank()] : e.rank();
      translated = std::make_exception_ptr(PeerLost(global, globalize(e.what()), e.peerAborted()));
      // The local peer may only have been the messenger: it gave up because a rank on another
      // host did not answer it or died, and its abort notice over TCP names that rank (it is
      // sent before its shared-memory flag is raised, see abort()).
      if (global >= 0 && global != rank_ && remote_) {
        if (auto behind = remote_->culpritBehind(global, globalize(e.what()), kMessengerNoticeWait))
          translated = behind;
      }
    }
  } catch (const Timeout& e) {
    if (!viaLocal) return error;
    translated = std::make_exception_ptr(Timeout(globalize(e.what())));
    // A local wait that timed out behind a live, unstopped peer (the shared-memory transport names
    // stopped ones itself): that peer most likely waits on a rank of another host. Ask the TCP
    // peers who does not answer, as a TCP deadline would, so that this rank names it too.
    if (remote_) {
      if (auto behind = remote_->culpritBehind(-1, globalize(e.what()), std::chrono::milliseconds(0))) {
        translated = behind;
      }
    }
  } catch (...) {
    return error;
  }
  try {
    std::rethrow_exception(translated);
  } catch (const PeerLost&) {
    std::lock_guard<std::mutex> lock(failMu_);
    if (!failure_) failure_ = translated;
  } catch (...) {
  }
  return translated;
}

void CompositeTransport::rethrowTranslated(std::exception_ptr error, bool viaLocal) {
  std::rethrow_exception(translate(std::move(error), viaLocal));
}

template <typename F>
void CompositeTransport::guarded(bool viaLocal, F&& f) {
  try {
    f();
  } catch (const PeerLost&) {
    rethrowTranslated(std::current_exception(), viaLocal);
  } catch (const Timeout&) {
    rethrowTranslated(std::current_exception(), viaLocal);
  }
}

void CompositeTransport::send(int peer, const void* data, size_t bytes, Deadline deadline) {
  checkPeer(peer);
  checkUsable();
  guarded(isLocal(peer), [&] { route(peer).send(subRank(peer), data, bytes, deadline); });
}

void CompositeTransport::recv(int peer, void* data, size_t bytes, Deadline deadline) {
  checkPeer(peer);
  checkUsable();
  guarded(isLocal(peer), [&] { route(peer).recv(subRank(peer), data, bytes, deadline); });
}

void CompositeTransport::sendRecv(int to, const void* sendData, size_t sendBytes, int from, void* recvData,
                                  size_t recvBytes, Deadline deadline) {
  checkPeer(to);
  checkPeer(from);
  checkUsable();
  bool toLocal = isLocal(to), fromLocal = isLocal(from);
  if (toLocal == fromLocal) {
    guarded(toLocal, [&] {
      route(to).sendRecv(subRank(to), sendData, sendBytes, subRank(from), recvData, recvBytes, deadline);
    });
    return;
  }
  // Different sub-transports: a zero-byte half is a no-op; otherwise the helper sends while
  // this thread receives.
  if (sendBytes == 0) return recv(from, recvData, recvBytes, deadline);
  if (recvBytes == 0) return send(to, sendData, sendBytes, deadline);
  Transport& sendVia = route(to);
  {
    std::lock_guard<std::mutex> lock(helperMu_);
    if (!helper_.joinable()) helper_ = std::thread([this] { helperLoop(); });
    job_ = SendJob{&sendVia, subRank(to), sendData, sendBytes, deadline, nullptr, true};
  }
  helperCv_.notify_all();
  std::exception_ptr recvError;
  bool translated = false;
  try {
    route(from).recv(subRank(from), recvData, recvBytes, deadline);
  } catch (const PeerLost&) {
    // Culprit first: aborting the other sub-transport tells its peers whom this rank blames.
    recvError = translate(std::current_exception(), fromLocal);
    translated = true;
    try {
      std::rethrow_exception(recvError);
    } catch (const PeerLost& e) {
      noteCulprit(e.rank());
    } catch (...) {
    }
    sendVia.abort("aborted: a peer was lost during a sendRecv");  // the helper must not outwait it
  } catch (const Aborted&) {
    recvError = std::current_exception();
    sendVia.abort("aborted during a sendRecv");
  } catch (...) {
    recvError = std::current_exception();
  }
  std::exception_ptr sendError;
  {
    std::unique_lock<std::mutex> lock(helperMu_);
    helperCv_.wait(lock, [&] { return !job_.pending; });
    sendError = job_.error;
  }
  if (recvError) {
    if (translated) std::rethrow_exception(recvError);
    guarded(fromLocal, [&] { std::rethrow_exception(recvError); });
  }
  if (sendError) {
    guarded(toLocal, [&] { std::rethrow_exception(sendError); });
  }
}

void CompositeTransport::helperLoop() {
  std::unique_lock<std::mutex> lock(helperMu_);
  while (true) {
    helperCv_.wait(lock, [&] { return stopHelper_ || (job_.pending && job_.transport != nullptr); });
    if (!job_.pending) return;  // stopping
    SendJob job = job_;
    job_.transport = nullptr;  // taken
    lock.unlock();
    std::exception_ptr error;
    try {
      job.transport->send(job.peer, job.data, job.bytes, job.deadline);
    } catch (...) {
      error = std::current_exception();
    }
    lock.lock();
    job_.error = error;
    job_.pending = false;
    helperCv_.notify_all();
  }
}

SharedSpace* CompositeTransport::sharedSpace(const std::vector<int>& ranks, Deadline deadline) {
  if (!local_) return nullptr;
  for (int r : ranks) {
    checkPeer(r);
    if (!isLocal(r)) return nullptr;
  }
  checkUsable();
  std::lock_guard<std::mutex> lock(spaceMu_);
  auto it = spaces_.find(ranks);
  if (it != spaces_.end()) return it->second.get();
  std::vector<int> localList;
  for (int r : ranks) localList.push_back(localIndex_[r]);
  SharedSpace* inner = nullptr;
  guarded(true, [&] { inner = local_->sharedSpace(localList, deadline); });
  if (inner == nullptr) return nullptr;
  auto view = std::make_unique<SpaceView>(this, inner, ranks);
  SharedSpace* result = view.get();
  spaces_.emplace(ranks, std::move(view));
  return result;
}

void CompositeTransport::post(int peer, const void* data, size_t bytes) {
  checkPeer(peer);
  checkUsable();
  guarded(false, [&] { remote_->post(peer, data, bytes); });
}

std::optional<MailboxMessage> CompositeTransport::poll() {
  // Messages that already arrived come first even after a failure (as over TCP alone): a peer's
  // abort notice may name the rank at fault.
  std::optional<MailboxMessage> message;
  guarded(false, [&] { message = remote_->poll(); });
  if (!message) checkUsable();
  return message;
}

bool CompositeTransport::waitForMessage(Deadline deadline) {
  // As poll(): a failure of the local sub-transport does not hide the mailbox (the remote one).
  bool result = false;
  guarded(false, [&] { result = remote_->waitForMessage(deadline); });
  if (!result) checkUsable();
  return result;
}

void CompositeTransport::wake() { remote_->wake(); }

void CompositeTransport::noteCulprit(int rank) {
  // Global numbers: the remote sub-transport is built over all ranks.
  if (remote_) remote_->noteCulprit(rank);
  // Local peers read the blame from the shared header, in local numbers (a remote culprit has
  // none there: they name this rank's abort instead).
  if (rank >= 0 && rank < static_cast<int>(localIndex_.size()) && isLocal(rank)) local_->noteCulprit(localIndex_[rank]);
}

void CompositeTransport::abort(const std::string& reason) {
  // TCP first: its abort notice (naming the culprit) is on its way before local peers see this
  // rank fail through shared memory, and they wait for it briefly (translate()).
  remote_->abort(reason);
  if (local_) local_->abort(reason);
}

}  // namespace hvd
