// Every environment variable the core declares (hvd::allParams(): the Params of every layer this
// binary links, the whole core) is named somewhere in docs/, so a new knob cannot ship
// undocumented.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "common/params.h"
#include "horovod/horovod.h"

namespace {

std::string allDocs() {
  std::string text;
  for (const auto& entry : std::filesystem::directory_iterator(std::filesystem::path(HVD_SOURCE_DIR) / "docs")) {
    if (entry.path().extension() != ".md") continue;
    std::ifstream in(entry.path());
    std::ostringstream content;
    content << in.rdbuf();
    text += content.str();
  }
  return text;
}

TEST(ParamsDocumented, EveryDeclaredVariableIsNamedInDocs) {
  (void)&hvd::init;  // links the API and, through it, every layer's Params
  const std::string docs = allDocs();
  ASSERT_FALSE(docs.empty());
  const auto params = hvd::allParams();
  EXPECT_GT(params.size(), 40u);
  for (const auto& param : params) {
    EXPECT_NE(docs.find(param.name), std::string::npos) << param.name << " is declared but not named in docs/";
  }
}

}  // namespace
