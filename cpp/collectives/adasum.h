// Adasum (adaptive summation, Maleki et al., MLSys 2021): the reduction of op=Adasum, written once
// over a point-to-point exchange so that every data plane runs the same arithmetic (the CPU
// backend over its Communicator, the MPI backend over MPI_Sendrecv).
//
// Pairwise operator on two vectors a, b:
//   adasum(a, b) = (1 - a.b / (2 |a|^2)) a + (1 - a.b / (2 |b|^2)) b
// where a coefficient is 1 when its |.|^2 < sqrt(DBL_MIN) (a zero vector adds nothing and
// produces no NaN). Equal vectors give that vector, orthogonal ones their sum.
//
// Over n = 2^k ranks it is a binary tree by rank bits: ((x0 + x1) + (x2 + x3)) + ..., with +
// the operator above. It runs as vector halving, distance doubling: at level L = 1, 2, 4, ...
// rank r and its partner r ^ L split the slice they share; each keeps one half, receives the
// partner's copy of that half, and combines them, the lower-ranked side being a. The dot product
// and the two squared norms are those of the full vectors: the partial sums of the 2L ranks of
// the level's group are summed among them (recursive doubling). An allgather phase in reverse
// order then restores the full vector on every rank.
//
// Per tensor: a fused buffer holds several tensors back to back (`counts`), and each tensor gets
// its own coefficients. Dot products and norms are accumulated in double for every dtype
// (float16/bfloat16 through float), each partial scaled by a power of two taken from its largest
// element, so float64 values near the limits of the type neither overflow nor underflow the
// squares. The combination is computed in double and rounded once to the dtype.
//
// Results are bitwise identical on every rank: every element of the result is computed by one
// rank and copied, and the sums of partials are formed in the same order on every rank.
//
// Vectors split over a group of ranks (ShardGroup, the GPU Adasum of adasum_hosts.h): each
// member of the group holds one shard of the same vectors and runs Adasum on it with its own
// partners; at every level the members' per-tensor partials are summed over the group too (in
// member order, the same bits on every member), so each tensor's coefficients are those of the
// whole tensor, wherever its pieces live.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "collectives/communicator.h"
#include "horovod/types.h"

namespace hvd::collectives {

// What Adasum needs from a data plane: its rank and size, and a simultaneous send to and receive
// from one peer (either side may be empty). Failures throw (as the data plane's own calls do).
class PairExchange {
 public:
  virtual ~PairExchange() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual void sendRecv(int peer, const void* send, size_t sendBytes, void* recv, size_t recvBytes) = 0;
};

// PairExchange over a Communicator (set ranks; each step bounded by the communicator's deadline).
class CommunicatorExchange final : public PairExchange {
 public:
  explicit CommunicatorExchange(Communicator& comm) : comm_(comm) {}
  int rank() const override { return comm_.rank(); }
  int size() const override { return comm_.size(); }
  void sendRecv(int peer, const void* send, size_t sendBytes, void* recv, size_t recvBytes) override {
    comm_.sendRecv(peer, send, sendBytes, peer, recv, recvBytes, comm_.deadline());
  }

 private:
  Communicator& comm_;
};

// The ranks holding the other shards of the vectors (see the top of this file), this rank among
// them. Failures throw.
class ShardGroup {
 public:
  virtual ~ShardGroup() = default;
  virtual int size() const = 0;
  // all[k * count, (k + 1) * count) = member k's `mine`, for every member k, on every member.
  virtual void allgather(const double* mine, size_t count, double* all) = 0;
};

// Whether Adasum runs on `n` ranks (a power of two; extra ranks are not folded in, as in Horovod).
bool adasumRankCountSupported(int n);
// Whether Adasum reduces `dtype` (float16, bfloat16, float32, float64).
bool adasumTypeSupported(DataType dtype);

// In place: buf (the tensors of `counts`, back to back) = Adasum over the ranks of `peers`.
// `scratch` is grown as needed (half the buffer) and may be kept between calls. Throws
// InvalidArgument, before anything is sent, for a rank count or dtype that is not supported.
// `shards` (may be null): buf is this rank's shard of vectors split over that group; every member
// passes the same number of counts (the same tensors, each one's element count in its shard,
// zeros allowed), the same total, and peers of the same size.
void adasum(PairExchange& peers, void* buf, const std::vector<size_t>& counts, DataType dtype,
            std::vector<uint8_t>& scratch, ShardGroup* shards = nullptr);

}  // namespace hvd::collectives
