#include "engine/message.h"

#include <algorithm>

#include "common/byte_codec.h"
#include "horovod/errors.h"

namespace hvd::engine {
namespace {

constexpr const char* kFormat = "engine message";  // names the input in DecodeErrors

// The flags byte of an encoded OpParams. Scale factors travel only when they are not 1.0 (the
// common case), which saves 16 bytes per request and response.
constexpr uint8_t kSharedInPlaceFlag = 1;
constexpr uint8_t kPrescaleFlag = 2;
constexpr uint8_t kPostscaleFlag = 4;
constexpr uint8_t kOneOffNameFlag = 8;  // requests only

// The flags byte of a response list.
constexpr uint8_t kListShutdownFlag = 1;
constexpr uint8_t kListKnobsFlag = 2;  // knobs follow the flags

// The flags byte of an ErrorInfo.
constexpr uint8_t kErrorPeerAbortedFlag = 1;

void writeKnobs(ByteWriter& w, const Knobs& k) {
  w.svarint(k.fusionThreshold);
  w.svarint(k.burstQuietUs);
  w.svarint(k.callerProgressUs);
  w.svarint(k.callerSpinUs);
  w.svarint(k.allreduceCrossoverBytes);
  w.u8((k.cacheEnabled ? 1 : 0) | (k.hierarchical ? 2 : 0));
}

Knobs readKnobs(ByteReader& in) {
  Knobs k;
  k.fusionThreshold = in.svarint();
  k.burstQuietUs = in.svarint();
  k.callerProgressUs = in.svarint();
  k.callerSpinUs = in.svarint();
  k.allreduceCrossoverBytes = in.svarint();
  const uint8_t flags = in.u8();
  k.cacheEnabled = (flags & 1) != 0;
  k.hierarchical = (flags & 2) != 0;
  return k;
}

// Everything of `p` but its kind, which each message writes first. `extraFlags` share the byte.
void writeParams(ByteWriter& w, const OpParams& p, uint8_t extraFlags) {
  w.u8(extraFlags | (p.sharedInPlace ? kSharedInPlaceFlag : 0) | (p.prescale != 1.0 ? kPrescaleFlag : 0) |
       (p.postscale != 1.0 ? kPostscaleFlag : 0));
  w.u8(static_cast<uint8_t>(p.dtype));
  w.u8(static_cast<uint8_t>(p.op));
  w.svarint(p.processSet);
  w.svarint(p.root);
  w.svarint(p.device);
  if (p.prescale != 1.0) w.f64(p.prescale);
  if (p.postscale != 1.0) w.f64(p.postscale);
}

// Reads what writeParams wrote into `p` (kind already set) and returns the flags byte.
uint8_t readParams(ByteReader& in, OpParams& p) {
  const uint8_t flags = in.u8();
  p.sharedInPlace = (flags & kSharedInPlaceFlag) != 0;
  p.dtype = static_cast<DataType>(in.u8());
  p.op = static_cast<ReduceOp>(in.u8());
  p.processSet = static_cast<int32_t>(in.svarint());
  p.root = static_cast<int32_t>(in.svarint());
  p.device = static_cast<int32_t>(in.svarint());
  if (flags & kPrescaleFlag) p.prescale = in.f64();
  if (flags & kPostscaleFlag) p.postscale = in.f64();
  return flags;
}

void writeRequest(ByteWriter& w, const Request& r) {
  w.u8(static_cast<uint8_t>(r.params.kind));
  writeParams(w, r.params, r.oneOffName ? kOneOffNameFlag : 0);
  w.str(r.name);
  w.svarints(r.shape);
  w.svarints(r.splits);
  w.str(r.group);
  w.svarint(r.groupSize);
}

Request readRequest(ByteReader& in) {
  Request r;
  r.params.kind = static_cast<Kind>(in.u8());
  r.oneOffName = (readParams(in, r.params) & kOneOffNameFlag) != 0;
  r.name = in.str();
  in.svarints(r.shape);
  in.svarints(r.splits);
  r.group = in.str();
  r.groupSize = static_cast<int32_t>(in.svarint());
  return r;
}

// Id sets (a rank's hits, a list's ready hits) go either as a bit vector over [min, max] or as
// delta-coded varints, whichever is smaller; the steady state (the ids of one training step,
// mostly contiguous) takes the bit vector: about one bit per tensor plus a few header bytes.
// Decoding yields the ids ascending.
void writeIds(ByteWriter& w, const std::vector<uint32_t>& ids) {
  w.varint(ids.size());
  if (ids.empty()) return;
  auto [minIt, maxIt] = std::minmax_element(ids.begin(), ids.end());
  uint32_t lo = *minIt, hi = *maxIt;
  size_t bitmapBytes = (static_cast<size_t>(hi - lo) + 8) / 8;
  size_t listBytes = ids.size() * 2;  // estimate: small deltas take one or two bytes
  w.varint(lo);
  if (bitmapBytes < listBytes) {
    w.u8(1);
    w.varint(hi - lo);
    uint8_t* bits = w.zeros(bitmapBytes);
    for (uint32_t id : ids) bits[(id - lo) / 8] |= static_cast<uint8_t>(1u << ((id - lo) % 8));
  } else {
    std::vector<uint32_t> sorted(ids);
    std::sort(sorted.begin(), sorted.end());
    w.u8(0);
    for (size_t i = 1; i < sorted.size(); ++i) w.varint(sorted[i] - sorted[i - 1]);
  }
}

void readIds(ByteReader& in, std::vector<uint32_t>& ids) {
  // Not count(): a bit vector packs eight ids per byte.
  // Every id is a cache id: below kNoCacheId (the reserved "none").
  uint64_t n = in.varint();
  ids.clear();
  if (n == 0) return;
  const uint64_t lo = in.varint();
  if (lo >= kNoCacheId) throw DecodeError("engine message: cache id out of range");
  if (in.u8() == 1) {
    // The span is checked against the bytes left before it sizes anything: span + 8 would wrap
    // for a span near 2^64 and let the loop below read past a zero-byte bit vector.
    uint64_t span = in.varint();
    if (span / 8 >= in.left()) throw DecodeError("engine message: bit vector longer than the message");
    if (n > span + 1) throw DecodeError("engine message: bit vector shorter than its count");
    if (span >= kNoCacheId - lo) throw DecodeError("engine message: cache id out of range");
    const uint8_t* bits = in.raw(static_cast<size_t>(span / 8 + 1));
    ids.reserve(static_cast<size_t>(n));
    for (uint64_t i = 0; i <= span; ++i) {
      if (bits[i / 8] & (1u << (i % 8))) ids.push_back(static_cast<uint32_t>(lo + i));
    }
    if (ids.size() != n) throw DecodeError("engine message: bit vector does not match its count");
  } else {
    ids.push_back(static_cast<uint32_t>(lo));
    for (uint64_t i = 1; i < n; ++i) {
      const uint64_t id = ids.back() + in.varint();  // a wrap shows as id < ids.back()
      if (id >= kNoCacheId || id < ids.back()) throw DecodeError("engine message: cache id out of range");
      ids.push_back(static_cast<uint32_t>(id));
    }
  }
}

void writeTensor(ByteWriter& w, const TensorInfo& t) {
  const TensorInfo& d = t.data();
  w.str(d.name);
  w.varint(t.cacheId == kNoCacheId ? 0 : uint64_t(t.cacheId) + 1);
  w.u8(t.cacheInsert ? 1 : 0);
  w.svarints(d.shape);
  w.svarints(d.firstDims);
  w.svarints(d.splits);
  w.str(d.group);
  w.svarint(d.groupSize);
}

TensorInfo readTensor(ByteReader& in) {
  TensorInfo t;
  t.name = in.str();
  uint64_t id = in.varint();
  if (id > kNoCacheId) throw DecodeError("engine message: cache id out of range");
  t.cacheId = id == 0 ? kNoCacheId : static_cast<uint32_t>(id - 1);
  t.cacheInsert = in.u8() != 0;
  if (t.cacheInsert && t.cacheId == kNoCacheId) throw DecodeError("engine message: cache insert without an id");
  in.svarints(t.shape);
  in.svarints(t.firstDims);
  in.svarints(t.splits);
  t.group = in.str();
  t.groupSize = static_cast<int32_t>(in.svarint());
  return t;
}

void writeResponse(ByteWriter& w, const Response& r) {
  w.u8(static_cast<uint8_t>(r.params.kind));
  if (r.cachedForm || r.params.kind == Kind::kEvict) {
    // Everything else is in the receiver's cache replica. Order matters for a fused response:
    // keep it (delta coding of sorted ids is only used for hit lists), so write plain varints.
    w.u8(1);
    w.varint(r.tensors.size());
    for (const auto& t : r.tensors) w.varint(t.cacheId);
    return;
  }
  w.u8(0);
  writeParams(w, r.params, 0);
  w.varint(r.tensors.size());
  for (const auto& t : r.tensors) writeTensor(w, t);
  w.str(r.error);
  w.svarint(r.lastJoined);
  w.svarint(r.setId);
  w.svarints(r.setRanks);
}

Response readResponse(ByteReader& in) {
  Response r;
  r.params.kind = static_cast<Kind>(in.u8());
  if (in.u8() == 1) {
    r.cachedForm = r.params.kind != Kind::kEvict;
    size_t n = in.count();
    r.tensors.resize(n);
    for (size_t i = 0; i < n; ++i) {
      const uint64_t id = in.varint();
      if (id >= kNoCacheId) throw DecodeError("engine message: cache id out of range");
      r.tensors[i].cacheId = static_cast<uint32_t>(id);
    }
    return r;
  }
  readParams(in, r.params);
  size_t n = in.count();
  r.tensors.reserve(n);
  for (size_t i = 0; i < n; ++i) r.tensors.push_back(readTensor(in));
  r.error = in.str();
  r.lastJoined = static_cast<int32_t>(in.svarint());
  r.setId = static_cast<int32_t>(in.svarint());
  in.svarints(r.setRanks);
  return r;
}

}  // namespace

std::string_view kindName(Kind kind) {
  if (isOpKind(kind)) return opTypeName(opOf(kind));
  switch (kind) {
    case Kind::kAddProcessSet: return "ADD_PROCESS_SET";
    case Kind::kRemoveProcessSet: return "REMOVE_PROCESS_SET";
    case Kind::kError: return "ERROR";
    case Kind::kEvict: return "EVICT";
    default: return "UNKNOWN";
  }
}

int64_t TensorInfo::rowElements() const {
  const auto& dims = data().shape;
  int64_t n = 1;
  for (size_t i = 1; i < dims.size(); ++i) n *= dims[i];
  return n;
}

int64_t TensorInfo::numElements() const {
  int64_t n = 1;
  for (auto d : data().shape) n *= d;
  return n;
}

std::string shapeString(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

ErrorInfo ErrorInfo::fromException(std::exception_ptr error) {
  ErrorInfo info;
  auto from = [&info](ErrorKind kind, const Error& e) {
    info.kind = kind;
    info.relayedFrom = e.relayedFrom();
    info.message = e.what();
  };
  try {
    std::rethrow_exception(error);
  } catch (const PeerLost& e) {
    from(ErrorKind::kPeerLost, e);
    info.rank = e.rank();
    info.peerAborted = e.peerAborted();
  } catch (const InvalidArgument& e) {
    from(ErrorKind::kInvalidArgument, e);
  } catch (const MismatchError& e) {
    from(ErrorKind::kMismatch, e);
  } catch (const Timeout& e) {
    from(ErrorKind::kTimeout, e);
  } catch (const StoreError& e) {
    from(ErrorKind::kStore, e);
  } catch (const Aborted& e) {
    from(ErrorKind::kAborted, e);
  } catch (const Error& e) {
    from(ErrorKind::kError, e);
  } catch (const std::exception& e) {
    info.kind = ErrorKind::kError;
    info.message = e.what();
  } catch (...) {
    info.kind = ErrorKind::kError;
    info.message = "unknown error";
  }
  return info;
}

namespace {

template <typename E>
std::exception_ptr relayed(E error, int relayedFrom) {
  error.setRelayedFrom(relayedFrom);
  return std::make_exception_ptr(std::move(error));
}

}  // namespace

std::exception_ptr ErrorInfo::toException() const {
  switch (kind) {
    case ErrorKind::kPeerLost: return relayed(PeerLost(rank, message, peerAborted), relayedFrom);
    case ErrorKind::kInvalidArgument: return relayed(InvalidArgument(message), relayedFrom);
    case ErrorKind::kMismatch: return relayed(MismatchError(message), relayedFrom);
    case ErrorKind::kTimeout: return relayed(Timeout(message), relayedFrom);
    case ErrorKind::kStore: return relayed(StoreError(message), relayedFrom);
    case ErrorKind::kAborted: return relayed(Aborted(message), relayedFrom);
    case ErrorKind::kError: break;
  }
  return relayed(Error(message), relayedFrom);
}

void encode(const RequestList& list, std::vector<uint8_t>& out) {
  out.clear();
  ByteWriter w(out);
  w.u8(static_cast<uint8_t>(MessageType::kRequests));
  w.varint(list.lastSeq);
  w.u8(list.shutdown ? 1 : 0);
  writeIds(w, list.hits);
  w.varint(list.requests.size());
  for (const auto& r : list.requests) writeRequest(w, r);
}

void encode(const ResponseList& list, std::vector<uint8_t>& out) {
  out.clear();
  ByteWriter w(out);
  w.u8(static_cast<uint8_t>(MessageType::kResponses));
  w.varint(list.seq);
  w.u8((list.shutdown ? kListShutdownFlag : 0) | (list.knobs.has_value() ? kListKnobsFlag : 0));
  if (list.shutdown) w.svarint(list.shutdownBy);
  if (list.knobs.has_value()) writeKnobs(w, *list.knobs);
  writeIds(w, list.hits);
  w.varint(list.items.size());
  for (const auto& r : list.items) writeResponse(w, r);
}

void encode(const ErrorInfo& info, std::vector<uint8_t>& out) {
  out.clear();
  ByteWriter w(out);
  w.u8(static_cast<uint8_t>(MessageType::kAbort));
  w.u8(static_cast<uint8_t>(info.kind));
  w.svarint(info.rank);
  w.svarint(info.relayedFrom);
  w.u8(info.peerAborted ? kErrorPeerAbortedFlag : 0);
  w.str(info.message);
}

MessageType messageType(const std::vector<uint8_t>& bytes) {
  if (bytes.empty()) throw DecodeError("engine message: empty");
  return static_cast<MessageType>(bytes[0]);
}

RequestList decodeRequestList(const std::vector<uint8_t>& bytes) {
  ByteReader in(bytes.data(), bytes.size(), kFormat);
  in.u8();
  RequestList list;
  list.lastSeq = in.varint();
  list.shutdown = in.u8() != 0;
  readIds(in, list.hits);
  size_t n = in.count();
  list.requests.reserve(n);
  for (size_t i = 0; i < n; ++i) list.requests.push_back(readRequest(in));
  return list;
}

ResponseList decodeResponseList(const std::vector<uint8_t>& bytes) {
  ByteReader in(bytes.data(), bytes.size(), kFormat);
  in.u8();
  ResponseList list;
  list.seq = in.varint();
  const uint8_t flags = in.u8();
  list.shutdown = (flags & kListShutdownFlag) != 0;
  if (list.shutdown) list.shutdownBy = static_cast<int32_t>(in.svarint());
  if (flags & kListKnobsFlag) list.knobs = readKnobs(in);
  readIds(in, list.hits);
  size_t n = in.count();
  list.items.reserve(n);
  for (size_t i = 0; i < n; ++i) list.items.push_back(readResponse(in));
  return list;
}

ErrorInfo decodeErrorInfo(const std::vector<uint8_t>& bytes) {
  ByteReader in(bytes.data(), bytes.size(), kFormat);
  in.u8();
  ErrorInfo info;
  const uint8_t kind = in.u8();
  if (kind > static_cast<uint8_t>(ErrorKind::kAborted))
    throw DecodeError(std::string(kFormat) + ": unknown error kind");
  info.kind = static_cast<ErrorKind>(kind);
  info.rank = static_cast<int>(in.svarint());
  info.relayedFrom = static_cast<int>(in.svarint());
  const uint8_t flags = in.u8();
  if ((flags & ~kErrorPeerAbortedFlag) != 0) throw DecodeError(std::string(kFormat) + ": unknown error flags");
  info.peerAborted = (flags & kErrorPeerAbortedFlag) != 0;
  info.message = in.str();
  return info;
}

}  // namespace hvd::engine
