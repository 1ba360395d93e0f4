// Copies into a collective's final output (internal to collectives/).
//
// A large output is written once and not read again by the collective, and it does not fit in
// the cache beside the inputs: ordinary stores first read every destination line from memory
// (read-for-ownership), then write it back, i.e. 3 bytes of memory traffic per byte written.
// Non-temporal (streaming) stores skip the read, 2 bytes per byte. On a memory-bound 2-core host
// that is the difference between the copy-out and the roof. Small outputs use memcpy: they stay
// cached for the caller.
//
// outputCopy() orders its streaming stores before returning (sfence), so a barrier that
// publishes "done" after it is correct.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#if defined(__x86_64__) || defined(__SSE2__)
#include <emmintrin.h>
#define HVD_STREAM_STORES 1
#endif

namespace hvd::collectives {

// Collectives whose output is at least this large stream their copies into it.
constexpr size_t kStreamOutputBytes = size_t(8) << 20;

// `fence` = false leaves the ordering to the caller (streamFence() before publishing).
inline void streamFence() {
#ifdef HVD_STREAM_STORES
  _mm_sfence();
#endif
}

inline void streamCopy(void* dst, const void* src, size_t bytes, bool fence = true) {
#ifdef HVD_STREAM_STORES
  auto* d = static_cast<uint8_t*>(dst);
  const auto* s = static_cast<const uint8_t*>(src);
  if (bytes < 256) {
    std::memcpy(d, s, bytes);
    return;
  }
  const size_t head = (16 - (reinterpret_cast<uintptr_t>(d) & 15)) & 15;
  std::memcpy(d, s, head);
  d += head;
  s += head;
  bytes -= head;
  size_t i = 0;
  for (; i + 64 <= bytes; i += 64) {
    __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i));
    __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 16));
    __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 32));
    __m128i e = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i), a);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 48), e);
  }
  std::memcpy(d + i, s + i, bytes - i);
  if (fence) _mm_sfence();
#else
  (void)fence;
  std::memcpy(dst, src, bytes);
#endif
}

// Streaming stores when `stream`, else memcpy. Unfenced: a caller that streamed calls
// streamFence() before publishing (one fence after many copies).
inline void streamOrCopy(void* dst, const void* src, size_t bytes, bool stream) {
  if (stream) {
    streamCopy(dst, src, bytes, /*fence=*/false);
  } else {
    std::memcpy(dst, src, bytes);
  }
}

// memcpy into an output of `outputBytes` in total: streaming (and fenced) when it is large.
inline void outputCopy(void* dst, const void* src, size_t bytes, size_t outputBytes) {
  const bool stream = outputBytes >= kStreamOutputBytes;
  streamOrCopy(dst, src, bytes, stream);
  if (stream) streamFence();
}

}  // namespace hvd::collectives
