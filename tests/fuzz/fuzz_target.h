// One fuzz target: HVD_FUZZ_TARGET(name) { ... } defines the function that takes one input.
// Built with -DHVD_FUZZ_LIBFUZZER it is also the binary's LLVMFuzzerTestOneInput (one target per
// binary); without, it registers itself under `name` so that tests/fuzz/regressions_test.cc
// replays the committed inputs (regressions/<name>/*, corpus/<name>/*) through the same function,
// no libFuzzer needed.
//
// A target returns normally for every input (decoders reject bad input by throwing the error
// their callers catch, which the target catches too); anything else is a finding: a sanitizer
// report, an uncaught exception, or a broken invariant (HVD_FUZZ_CHECK, which aborts).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <string_view>

namespace hvd::fuzz {

using TargetFn = int (*)(const uint8_t* data, size_t size);

inline std::map<std::string, TargetFn>& registry() {
  static std::map<std::string, TargetFn> targets;
  return targets;
}

struct Registration {
  Registration(const char* name, TargetFn fn) { registry()[name] = fn; }
};

[[noreturn]] inline void checkFailed(const char* what, const char* file, int line) {
  std::fprintf(stderr, "%s:%d: fuzz invariant broken: %s\n", file, line, what);
  std::abort();
}

inline std::string_view text(const uint8_t* data, size_t size) {
  return std::string_view(reinterpret_cast<const char*>(data), size);
}

}  // namespace hvd::fuzz

#define HVD_FUZZ_CHECK(cond)                                          \
  do {                                                                \
    if (!(cond)) ::hvd::fuzz::checkFailed(#cond, __FILE__, __LINE__); \
  } while (0)

#ifdef HVD_FUZZ_LIBFUZZER
#define HVD_FUZZ_ENTRY(name) \
  extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) { return hvdFuzz_##name(data, size); }
#else
#define HVD_FUZZ_ENTRY(name) static const ::hvd::fuzz::Registration hvdFuzzRegistration_##name(#name, &hvdFuzz_##name);
#endif

#define HVD_FUZZ_TARGET(name)                                  \
  static int hvdFuzz_##name(const uint8_t* data, size_t size); \
  HVD_FUZZ_ENTRY(name)                                         \
  static int hvdFuzz_##name(const uint8_t* data, size_t size)
