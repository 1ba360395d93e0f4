// horovodrun's command line and environment parameters: the input is a list of arguments
// (NUL-separated) parsed and validated as horovodrun does, then "NAME=VALUE" lines read as the
// core's HOROVOD_* parameters are. Bad values fail with UsageError / InvalidArgument naming them.
#include <string>
#include <vector>

#include "cli.h"
#include "common/params.h"
#include "fuzz_target.h"
#include "horovod/errors.h"
#include "options.h"

using namespace hvd;
using namespace hvd::launcher;

HVD_FUZZ_TARGET(launcher_args) {
  const std::string input(fuzz::text(data, size));
  const size_t split = input.find("\n\n");
  const std::string argText = input.substr(0, split);
  std::vector<std::string> args;
  size_t start = 0;
  while (start <= argText.size()) {
    size_t end = argText.find('\0', start);
    if (end == std::string::npos) end = argText.size();
    args.push_back(argText.substr(start, end - start));
    start = end + 1;
  }
  try {
    Options options = parseCommandLine(args);
    validateOptions(options);
  } catch (const UsageError&) {
  }
  if (split == std::string::npos) return 0;
  // Environment: each line "NAME=VALUE", read through every parser a Param has.
  size_t at = split + 2;
  while (at < input.size()) {
    size_t end = input.find('\n', at);
    if (end == std::string::npos) end = input.size();
    std::string line = input.substr(at, end - at);
    at = end + 1;
    size_t eq = line.find('=');
    if (eq == std::string::npos) continue;
    const std::string name = line.substr(0, eq), value = line.substr(eq + 1);
    try {
      detail::parseBool(name, value);
    } catch (const InvalidArgument&) {
    }
    try {
      detail::parseInt(name, value);
    } catch (const InvalidArgument&) {
    }
    try {
      detail::parseDouble(name, value);
    } catch (const InvalidArgument&) {
    }
  }
  return 0;
}
