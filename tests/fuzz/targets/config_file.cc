// horovodrun --config-file (launcher/config_file.h): any text parses and applies to the options,
// or fails with UsageError naming the file.
#include <string>

#include "config_file.h"
#include "fuzz_target.h"
#include "horovod/errors.h"
#include "options.h"

using namespace hvd;
using namespace hvd::launcher;

HVD_FUZZ_TARGET(config_file) {
  Options options;
  try {
    applyConfigText(std::string(fuzz::text(data, size)), "config.yaml", options);
  } catch (const UsageError& e) {
    HVD_FUZZ_CHECK(std::string(e.what()).find("config.yaml") != std::string::npos ||
                   std::string(e.what()).find("controller") != std::string::npos);
  }
  return 0;
}
