#include "common/package_dirs.h"

#include <mutex>

namespace hvd {
namespace {

std::mutex& dirsMutex() {
  static std::mutex mu;
  return mu;
}
std::vector<std::string>& dirs() {
  static std::vector<std::string> d;
  return d;
}

}  // namespace

void setPythonPackageDirs(std::vector<std::string> list) {
  std::lock_guard<std::mutex> lock(dirsMutex());
  dirs() = std::move(list);
}

std::vector<std::string> pythonPackageDirs() {
  std::lock_guard<std::mutex> lock(dirsMutex());
  return dirs();
}

}  // namespace hvd
