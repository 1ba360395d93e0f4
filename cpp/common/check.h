// Check macros: throw an hvd::Error subclass that records file:line and, for the comparing
// forms, both values. Use them for conditions that indicate a bug or bad input, never for
// control flow.
#pragma once

#include <sstream>
#include <string>

#include "horovod/errors.h"

namespace hvd::detail {

template <typename E>
[[noreturn]] void throwAt(const char* file, int line, const std::string& what) {
  std::ostringstream out;
  out << what << " [" << file << ":" << line << "]";
  throw E(out.str());
}

}  // namespace hvd::detail

// HVD_CHECK(cond) << "message";  -- throws hvd::Error.
#define HVD_CHECK_AS(ErrorType, cond)                                                                               \
  if (cond) {                                                                                                       \
  } else                                                                                                            \
    for (std::ostringstream hvd_check_msg_;;                                                                        \
         ::hvd::detail::throwAt<ErrorType>(__FILE__, __LINE__, "Check failed: " #cond ": " + hvd_check_msg_.str())) \
    hvd_check_msg_

#define HVD_CHECK(cond) HVD_CHECK_AS(::hvd::Error, cond)

#define HVD_CHECK_OP_AS(ErrorType, a, op, b)                                                             \
  if (auto hvd_a_ = (a), hvd_b_ = (b); hvd_a_ op hvd_b_) {                                               \
  } else                                                                                                 \
    for (std::ostringstream hvd_check_msg_;; ::hvd::detail::throwAt<ErrorType>(__FILE__, __LINE__, [&] { \
           std::ostringstream s;                                                                         \
           s << "Check failed: " #a " " #op " " #b " (" << hvd_a_ << " vs " << hvd_b_                    \
             << "): " << hvd_check_msg_.str();                                                           \
           return s.str();                                                                               \
         }()))                                                                                           \
    hvd_check_msg_

#define HVD_CHECK_EQ(a, b) HVD_CHECK_OP_AS(::hvd::Error, a, ==, b)
#define HVD_CHECK_NE(a, b) HVD_CHECK_OP_AS(::hvd::Error, a, !=, b)
#define HVD_CHECK_LT(a, b) HVD_CHECK_OP_AS(::hvd::Error, a, <, b)
#define HVD_CHECK_LE(a, b) HVD_CHECK_OP_AS(::hvd::Error, a, <=, b)
#define HVD_CHECK_GE(a, b) HVD_CHECK_OP_AS(::hvd::Error, a, >=, b)

// Throws the system error for errno with context: HVD_SYSCHECK(fd >= 0, "open " + path);
#define HVD_SYSCHECK(cond, what)                                              \
  do {                                                                        \
    if (!(cond)) ::hvd::detail::throwSystemError(__FILE__, __LINE__, (what)); \
  } while (0)

namespace hvd::detail {
[[noreturn]] void throwSystemError(const char* file, int line, const std::string& what);
}
