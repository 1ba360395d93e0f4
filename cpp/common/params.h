// Parameter registry: every HOROVOD_* environment variable the core reads is declared once, as a
// Param next to its user, with its name, default and doc. Values are parsed strictly: a value
// that does not parse fails with InvalidArgument naming the variable and the value, so a typo in
// a launch script is an error at init, not a silently ignored knob.
//
// Params read through an EnvLookup so that tests can run several ranks in one process, each with
// its own environment.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace hvd {

using EnvLookup = std::function<std::optional<std::string>(const std::string& name)>;
// Reads the process environment (getenv).
const EnvLookup& processEnvironment();
// Reads a fixed map first, then nothing else (for tests).
EnvLookup mapEnvironment(std::vector<std::pair<std::string, std::string>> values);

struct ParamSpec {
  std::string name;
  std::string defaultText;
  std::string doc;
};
// Every declared parameter of the layers linked into this binary, in declaration order. A test
// (tests/cpp/api/params_documented_test.cc) checks that docs/ names each of the core's.
std::vector<ParamSpec> allParams();

namespace detail {
void registerParam(ParamSpec spec);
// Parsers: throw InvalidArgument "<name>=<value>: <why>" on bad input.
bool parseBool(const std::string& name, const std::string& value);
int64_t parseInt(const std::string& name, const std::string& value);
double parseDouble(const std::string& name, const std::string& value);
template <typename T>
std::string toText(const T& value);
}  // namespace detail

// T is one of bool, int64_t, double, std::string.
// Booleans accept integers (> 0 is true, as Horovod) and true/false/yes/no/on/off.
template <typename T>
class Param {
 public:
  Param(const char* name, T defaultValue, const char* doc) : name_(name), default_(defaultValue) {
    detail::registerParam({name, detail::toText(defaultValue), doc});
  }
  const char* name() const { return name_; }
  const T& defaultValue() const { return default_; }
  bool isSet(const EnvLookup& env = processEnvironment()) const {
    auto value = env(name_);
    return value.has_value() && !value->empty();
  }
  T get(const EnvLookup& env = processEnvironment()) const {
    auto value = env(name_);
    if (!value.has_value() || value->empty()) return default_;
    if constexpr (std::is_same_v<T, bool>) {
      return detail::parseBool(name_, *value);
    } else if constexpr (std::is_same_v<T, int64_t>) {
      return detail::parseInt(name_, *value);
    } else if constexpr (std::is_same_v<T, double>) {
      return detail::parseDouble(name_, *value);
    } else {
      return *value;
    }
  }

 private:
  const char* name_;
  T default_;
};

}  // namespace hvd
