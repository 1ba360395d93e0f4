// Communicator: a process set's view of the job's Transport. Algorithms address peers by *set
// rank* (index in the sorted member list); the communicator maps them to global ranks.
//
// Used only from the engine's background thread (or one test thread per rank).
#pragma once

#include <vector>

#include "common/check.h"
#include "transport/transport.h"

namespace hvd {

class Communicator {
 public:
  // `members`: ascending global ranks; must contain transport.rank().
  Communicator(Transport& transport, std::vector<int> members, std::chrono::milliseconds timeout);

  int rank() const { return rank_; }  // set rank
  int size() const { return static_cast<int>(members_.size()); }
  int globalRank(int setRank) const { return members_[setRank]; }
  const std::vector<int>& members() const { return members_; }
  Transport& transport() { return transport_; }
  // Deadline for one collective started now.
  Deadline deadline() const { return Deadline::after(timeout_); }

  void send(int peer, const void* data, size_t bytes, Deadline d) {
    transport_.send(members_[peer], data, bytes, d);
  }
  void recv(int peer, void* data, size_t bytes, Deadline d) {
    transport_.recv(members_[peer], data, bytes, d);
  }
  void sendRecv(int to, const void* sendData, size_t sendBytes, int from, void* recvData,
                size_t recvBytes, Deadline d) {
    transport_.sendRecv(members_[to], sendData, sendBytes, members_[from], recvData, recvBytes, d);
  }
  // Shared memory over all members when they are on one host and the transport offers it;
  // created on first call (collectively), cached afterwards.
  SharedSpace* sharedSpace(Deadline d);

 private:
  Transport& transport_;
  std::vector<int> members_;
  int rank_ = -1;
  std::chrono::milliseconds timeout_;
  bool sharedQueried_ = false;
  SharedSpace* shared_ = nullptr;
};

}  // namespace hvd
