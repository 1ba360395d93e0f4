// --config-file: a small YAML subset, enough for Horovod's config schema:
// block mappings nested by indentation (spaces only), scalars (plain, 'single' or "double"
// quoted), inline mappings {a: 1, b: 2}, comments (# ...), blank lines and "---". Sequences,
// anchors and multi-line scalars are rejected. Every error names the file and the line.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "options.h"

namespace hvd::launcher {

struct YamlEntry;

struct YamlNode {
  bool isMap = false;
  bool isNull = false;          // "key:" with nothing under it, "~" or "null"
  std::string scalar;           // for scalars (quotes removed)
  int line = 0;                 // 1-based line where the node starts
  std::vector<YamlEntry> entries;  // for maps, in file order

  const YamlNode* find(const std::string& key) const;
};

// One key of a map and its value. (Not std::pair: a pair of a type that is still incomplete
// does not compile with every standard library.)
struct YamlEntry {
  YamlEntry(std::string k, YamlNode v) : first(std::move(k)), second(std::move(v)) {}
  std::string first;
  YamlNode second;
};

// Parses text; `source` names it in errors ("<source>:<line>: <problem>"). Throws UsageError.
YamlNode parseYaml(const std::string& text, const std::string& source);

// Reads the file at path and sets every option it names that the command line left unset
// (a flag given on the command line, positive or negative, always wins; the file wins over the
// defaults). As in Horovod, a non-empty stall_check section without `enabled` enables the check.
// Unknown keys are reported as warnings on stderr. Throws UsageError for
// unreadable files, syntax errors and values of the wrong type, and
// "No such controller supported: <v>" for an unknown controller.
void applyConfigFile(const std::string& path, Options& options);
// The same for a config file's contents; `path` names it in errors.
void applyConfigText(const std::string& contents, const std::string& path, Options& options);

}  // namespace hvd::launcher
