#include <cerrno>
#include <cstring>
#include <sstream>

#include "common/check.h"

namespace hvd::detail {

[[noreturn]] void throwSystemError(const char* file, int line, const std::string& what) {
  int saved = errno;
  std::ostringstream out;
  out << what << ": " << std::strerror(saved) << " (errno " << saved << ") [" << file << ":" << line << "]";
  throw Error(out.str());
}

}  // namespace hvd::detail
