#include "common/params.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <mutex>
#include <sstream>

#include "horovod/errors.h"

namespace hvd {
namespace {

std::mutex& registryMutex() {
  static std::mutex mutex;
  return mutex;
}
std::vector<ParamSpec>& registry() {
  static std::vector<ParamSpec> specs;
  return specs;
}

std::string lower(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(), [](unsigned char c) { return std::tolower(c); });
  return text;
}

[[noreturn]] void badValue(const std::string& name, const std::string& value, const char* expected) {
  throw InvalidArgument(name + "='" + value + "' is not " + expected +
                        ". See docs/env-vars.md for the accepted values.");
}

}  // namespace

const EnvLookup& processEnvironment() {
  static const EnvLookup lookup = [](const std::string& name) -> std::optional<std::string> {
    const char* value = std::getenv(name.c_str());
    if (value == nullptr) return std::nullopt;
    return std::string(value);
  };
  return lookup;
}

EnvLookup mapEnvironment(std::vector<std::pair<std::string, std::string>> values) {
  return [values = std::move(values)](const std::string& name) -> std::optional<std::string> {
    for (const auto& [key, value] : values) {
      if (key == name) return value;
    }
    return std::nullopt;
  };
}

std::vector<ParamSpec> allParams() {
  std::lock_guard<std::mutex> lock(registryMutex());
  return registry();
}

namespace detail {

void registerParam(ParamSpec spec) {
  std::lock_guard<std::mutex> lock(registryMutex());
  registry().push_back(std::move(spec));
}

bool parseBool(const std::string& name, const std::string& value) {
  std::string v = lower(value);
  if (v == "true" || v == "yes" || v == "on") return true;
  if (v == "false" || v == "no" || v == "off") return false;
  errno = 0;
  char* end = nullptr;
  long long n = std::strtoll(v.c_str(), &end, 10);
  if (errno != 0 || end == v.c_str() || *end != '\0') badValue(name, value, "a boolean (0/1, true/false)");
  return n > 0;
}

int64_t parseInt(const std::string& name, const std::string& value) {
  errno = 0;
  char* end = nullptr;
  long long n = std::strtoll(value.c_str(), &end, 10);
  while (end != nullptr && std::isspace(static_cast<unsigned char>(*end))) ++end;
  if (errno != 0 || end == value.c_str() || *end != '\0') badValue(name, value, "an integer");
  return n;
}

double parseDouble(const std::string& name, const std::string& value) {
  errno = 0;
  char* end = nullptr;
  double d = std::strtod(value.c_str(), &end);
  while (end != nullptr && std::isspace(static_cast<unsigned char>(*end))) ++end;
  if (errno != 0 || end == value.c_str() || *end != '\0') badValue(name, value, "a number");
  return d;
}

template <>
std::string toText(const bool& value) {
  return value ? "1" : "0";
}
template <>
std::string toText(const int64_t& value) {
  return std::to_string(value);
}
template <>
std::string toText(const double& value) {
  std::ostringstream out;
  out << value;
  return out.str();
}
template <>
std::string toText(const std::string& value) {
  return value;
}

}  // namespace detail
}  // namespace hvd
