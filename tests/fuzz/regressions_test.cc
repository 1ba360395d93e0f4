// Replays the committed fuzz inputs through the fuzz targets' functions (fuzz_target.h), without
// libFuzzer: regressions/<target>/* (inputs that once crashed a target, kept after the fix) and
// corpus/<target>/* (the seeds and what campaigns kept). A target that crashes, trips a
// sanitizer or breaks an invariant on one of them fails this test.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

#include "fuzz_target.h"

namespace fs = std::filesystem;

namespace {

std::vector<uint8_t> readFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Runs every file under <dir>/<target>/ through its target; returns how many ran.
size_t replay(const std::string& dir) {
  size_t ran = 0;
  const fs::path root = fs::path(HVD_FUZZ_DIR) / dir;
  if (!fs::exists(root)) return 0;
  for (const auto& targetDir : fs::directory_iterator(root)) {
    if (!targetDir.is_directory()) continue;
    const std::string name = targetDir.path().filename();
    auto it = hvd::fuzz::registry().find(name);
    EXPECT_NE(it, hvd::fuzz::registry().end()) << root / name << " names no fuzz target";
    if (it == hvd::fuzz::registry().end()) continue;
    for (const auto& file : fs::directory_iterator(targetDir.path())) {
      if (!file.is_regular_file() || file.path().filename().string().starts_with('.')) continue;
      SCOPED_TRACE(file.path().string());
      std::vector<uint8_t> input = readFile(file.path());
      it->second(input.data(), input.size());
      ++ran;
    }
  }
  return ran;
}

}  // namespace

TEST(FuzzRegressions, EveryTargetIsRegistered) { EXPECT_EQ(hvd::fuzz::registry().size(), 13u); }

TEST(FuzzRegressions, CrashInputsStayFixed) { replay("regressions"); }

TEST(FuzzRegressions, CorpusInputsPass) {
  // Every target has a seed corpus.
  for (const auto& [name, fn] : hvd::fuzz::registry()) {
    EXPECT_TRUE(fs::is_directory(fs::path(HVD_FUZZ_DIR) / "corpus" / name)) << "no corpus for " << name;
  }
  EXPECT_GT(replay("corpus"), 0u);
}
