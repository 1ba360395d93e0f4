// Control-plane messages of the engine: what workers tell the coordinator (RequestList), what
// the coordinator tells every rank (ResponseList), and the abort notice any rank sends when it
// fails. Plain structs plus encode/decode; used only by the threads running the engines.
#pragma once

#include <cstdint>
#include <exception>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/knobs.h"
#include "horovod/types.h"

namespace hvd::engine {

// Request kinds. A collective's kind is its public OpType value itself, so kindOf() and opOf()
// convert without a table and a new OpType is a valid Kind (named by opTypeName) with no entry
// here; the aliases below are shorthands for engine code. The engine's own kinds start at
// kFirstInternalKind.
constexpr uint8_t kFirstInternalKind = 16;
static_assert(kNumOpTypes <= kFirstInternalKind, "OpType values must stay below the engine's own kinds");
constexpr uint8_t opKindValue(OpType t) { return static_cast<uint8_t>(t); }
enum class Kind : uint8_t {
  kAllreduce = opKindValue(OpType::kAllreduce),
  kAllgather = opKindValue(OpType::kAllgather),
  kBroadcast = opKindValue(OpType::kBroadcast),
  kJoin = opKindValue(OpType::kJoin),
  kAdasum = opKindValue(OpType::kAdasum),
  kAlltoall = opKindValue(OpType::kAlltoall),
  kBarrier = opKindValue(OpType::kBarrier),
  kReducescatter = opKindValue(OpType::kReducescatter),
  kAddProcessSet = kFirstInternalKind,
  kRemoveProcessSet = kFirstInternalKind + 1,
  kError = 32,  // response only
  kEvict = 33,  // response-list item only: drop cache ids on every rank
};
constexpr Kind kindOf(OpType t) { return static_cast<Kind>(opKindValue(t)); }
// Whether `kind` is a public collective (an OpType), and which.
constexpr bool isOpKind(Kind kind) { return static_cast<uint8_t>(kind) < kNumOpTypes; }
constexpr OpType opOf(Kind kind) { return static_cast<OpType>(static_cast<uint8_t>(kind)); }
// "ALLREDUCE", ... as Horovod's RequestType_Name (opTypeName for collectives).
std::string_view kindName(Kind kind);

constexpr uint32_t kNoCacheId = std::numeric_limits<uint32_t>::max();
constexpr int kCpuDevice = -1;

// What defines an operation besides its tensors: everything the ranks of a set must agree on.
// Request, Response and CacheEntry each carry one, compared and copied as a unit. Ordered to pack
// into 32 bytes.
struct OpParams {
  Kind kind = Kind::kAllreduce;
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  // Request: an allreduce whose output lies inside one of this rank's shared buffers
  // (transport/peer_memory.h; in place or not), set on a single host: eligible for the shared
  // in-place algorithm. Response and cache entry: every member flagged its request so and none
  // has joined: run that algorithm (AllreduceOptions::sharedOutputs); such responses are never fused.
  bool sharedInPlace = false;
  int32_t processSet = 0;
  int32_t root = -1;  // broadcast: global rank
  int32_t device = kCpuDevice;
  double prescale = 1.0;
  double postscale = 1.0;  // reducescatter Average: already multiplied by 1/size

  bool operator==(const OpParams&) const = default;
};
static_assert(sizeof(OpParams) == 32);

// One tensor's request, as a rank submits it.
struct Request {
  OpParams params;
  std::string name;
  std::vector<int64_t> shape;
  std::vector<int32_t> splits;  // alltoall: rows per set rank (normalized); add-set: ranks
  std::string group;            // grouped ops: the group's base name ("" = not grouped)
  int32_t groupSize = 0;
  bool oneOffName = false;  // never cached (Options::oneOffName)
  int32_t rank = -1;  // global rank of the requester (filled in by the coordinator)
};

// One tensor of a response. For a tensor answered from the cache (Response::cachedForm) only
// cacheId is sent; the receiver fills the rest from its cache replica.
struct TensorInfo {
  // In memory only: when set, every field but cacheId/cacheInsert lives there (a cache entry's
  // tensor), so the steady state copies no names or shapes. Valid while that entry lives: until
  // the end of the response list being built or processed (evictions are applied last).
  // First, with cacheId and cacheInsert: what a cached step reads of every tensor shares a line.
  const TensorInfo* ref = nullptr;
  uint32_t cacheId = kNoCacheId;
  bool cacheInsert = false;         // this response adds cacheId to every rank's cache
  std::string name;
  std::vector<int64_t> shape;       // the common shape (allgather/alltoall: requests[0]'s)
  std::vector<int64_t> firstDims;   // allgather/alltoall: dim 0 of every set rank
  std::vector<int32_t> splits;      // alltoall: set size x set size, row r = rank r's splits
  std::string group;
  int32_t groupSize = 0;

  const TensorInfo& data() const { return ref != nullptr ? *ref : *this; }
  int64_t rowElements() const;  // product of dims >= 1 (of data())
  int64_t numElements() const;  // product of shape (of data())
};

struct Response {
  OpParams params;
  std::vector<TensorInfo> tensors;
  std::string error;               // kError
  int32_t lastJoined = -1;         // kJoin
  int32_t setId = -1;              // kAddProcessSet / kRemoveProcessSet
  std::vector<int32_t> setRanks;   // kAddProcessSet
  bool cachedForm = false;         // every tensor is a live cache id: encode ids only
};

// Worker -> coordinator. `hits` are cache ids of requests identical to their cached response.
struct RequestList {
  uint64_t lastSeq = 0;  // seq of the last ResponseList the sender processed
  bool shutdown = false;
  std::vector<uint32_t> hits;
  std::vector<Request> requests;
  bool empty() const { return !shutdown && hits.empty() && requests.empty(); }
  void clear() {  // keeps the capacity
    lastSeq = 0;
    shutdown = false;
    hits.clear();
    requests.clear();
  }
};

// Coordinator -> every rank: the globally ordered work to do. `hits` are the cache ids that every
// required rank of their set reported as hits since the last list (the AND of the ranks' hit bit
// vectors), ascending and travelling as a bit vector: every rank, rank 0 included, turns them into
// the same fused responses from its own cache replica (cachedResponses(), fusion.h) and executes
// those first, then `items` in order.
struct ResponseList {
  uint64_t seq = 0;
  bool shutdown = false;
  int32_t shutdownBy = -1;  // with shutdown: the first rank that asked for it (-1: unknown)
  // Set when the knobs change with this list: every rank applies them before its responses.
  std::optional<Knobs> knobs;
  std::vector<uint32_t> hits;
  std::vector<Response> items;
};

// Any rank -> any rank: "I failed with this error".
enum class ErrorKind : uint8_t {
  kError = 0,
  kInvalidArgument,
  kMismatch,
  kTimeout,
  kPeerLost,
  kStore,
  kAborted,
};
struct ErrorInfo {
  ErrorKind kind = ErrorKind::kError;
  int rank = -1;             // kPeerLost: the lost rank
  int relayedFrom = -1;      // the rank that relayed this failure (Error::relayedFrom()); -1: this rank's
  bool peerAborted = false;  // kPeerLost: the lost rank aborted rather than vanished (PeerLost::peerAborted())
  std::string message;

  // The fields round-trip through the exception: fromException(toException()) gives back each
  // field that the kind uses (rank and peerAborted: kPeerLost only).
  static ErrorInfo fromException(std::exception_ptr error);
  // A fresh exception object of the right hvd::Error subclass.
  std::exception_ptr toException() const;
};

enum class MessageType : uint8_t { kRequests = 1, kResponses = 2, kAbort = 3 };

void encode(const RequestList& list, std::vector<uint8_t>& out);
void encode(const ResponseList& list, std::vector<uint8_t>& out);
void encode(const ErrorInfo& info, std::vector<uint8_t>& out);
MessageType messageType(const std::vector<uint8_t>& bytes);  // throws on an empty message
RequestList decodeRequestList(const std::vector<uint8_t>& bytes);
ResponseList decodeResponseList(const std::vector<uint8_t>& bytes);
ErrorInfo decodeErrorInfo(const std::vector<uint8_t>& bytes);

// "[a, b, c]" as Horovod's TensorShape::DebugString.
std::string shapeString(const std::vector<int64_t>& shape);

}  // namespace hvd::engine
