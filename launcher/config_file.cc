#include "config_file.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <iostream>
#include <sstream>

namespace hvd::launcher {

const YamlNode* YamlNode::find(const std::string& key) const {
  for (const auto& [k, v] : entries) {
    if (k == key) return &v;
  }
  return nullptr;
}

namespace {

[[noreturn]] void syntaxError(const std::string& source, int line, const std::string& what) {
  throw UsageError(source + ":" + std::to_string(line) + ": " + what);
}

std::string trim(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

// Removes a trailing comment: '#' at the start or after whitespace, outside quotes.
std::string stripComment(const std::string& line) {
  char quote = 0;
  for (size_t i = 0; i < line.size(); ++i) {
    char c = line[i];
    if (quote != 0) {
      if (c == quote) quote = 0;
      continue;
    }
    if (c == '\'' || c == '"') {
      quote = c;
    } else if (c == '#' && (i == 0 || std::isspace(static_cast<unsigned char>(line[i - 1])))) {
      return line.substr(0, i);
    }
  }
  return line;
}

// Position of the ':' that ends a key (followed by a space or the end), outside quotes.
size_t findKeyColon(const std::string& text) {
  char quote = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (quote != 0) {
      if (c == quote) quote = 0;
      continue;
    }
    if (c == '\'' || c == '"') quote = c;
    if (c == ':' && (i + 1 == text.size() || text[i + 1] == ' ')) return i;
  }
  return std::string::npos;
}

// Parses a plain or quoted scalar.
YamlNode parseScalar(const std::string& raw, const std::string& source, int line) {
  YamlNode node;
  node.line = line;
  std::string text = trim(raw);
  if (text.empty() || text == "~" || text == "null" || text == "Null" || text == "NULL") {
    node.isNull = true;
    return node;
  }
  char first = text[0];
  if (first == '\'' || first == '"') {
    if (text.size() < 2 || text.back() != first) syntaxError(source, line, "unterminated quoted string: " + text);
    std::string body = text.substr(1, text.size() - 2);
    std::string out;
    for (size_t i = 0; i < body.size(); ++i) {
      if (first == '\'' && body[i] == '\'' && i + 1 < body.size() && body[i + 1] == '\'') {
        out += '\'';  // '' is an escaped quote in single-quoted YAML
        ++i;
      } else if (first == '"' && body[i] == '\\' && i + 1 < body.size()) {
        char e = body[++i];
        out += e == 'n' ? '\n' : e == 't' ? '\t' : e;
      } else {
        out += body[i];
      }
    }
    node.scalar = out;
    return node;
  }
  if (first == '[' || (first == '-' && (text.size() == 1 || text[1] == ' '))) {
    syntaxError(source, line, "sequences are not supported in the config file");
  }
  if (first == '&' || first == '*' || first == '|' || first == '>' || first == '!') {
    syntaxError(source, line, std::string("unsupported YAML feature '") + first + "'");
  }
  node.scalar = text;
  return node;
}

// Parses "{a: 1, b: two}" (one level, no nesting).
YamlNode parseFlowMap(const std::string& text, const std::string& source, int line) {
  YamlNode node;
  node.isMap = true;
  node.line = line;
  if (text.back() != '}') syntaxError(source, line, "unterminated inline mapping: " + text);
  std::string body = text.substr(1, text.size() - 2);
  std::vector<std::string> items;
  std::string current;
  char quote = 0;
  for (char c : body) {
    if (quote != 0) {
      if (c == quote) quote = 0;
    } else if (c == '\'' || c == '"') {
      quote = c;
    } else if (c == '{' || c == '[') {
      syntaxError(source, line, "nested inline collections are not supported");
    } else if (c == ',') {
      items.push_back(current);
      current.clear();
      continue;
    }
    current += c;
  }
  if (!trim(current).empty()) items.push_back(current);
  for (const auto& item : items) {
    std::string entry = trim(item);
    if (entry.empty()) continue;
    size_t colon = findKeyColon(entry);
    if (colon == std::string::npos)
      syntaxError(source, line, "expected 'key: value' in inline mapping, got '" + entry + "'");
    std::string key = parseScalar(entry.substr(0, colon), source, line).scalar;
    if (node.find(key) != nullptr) syntaxError(source, line, "duplicate key '" + key + "'");
    node.entries.emplace_back(key, parseScalar(entry.substr(colon + 1), source, line));
  }
  return node;
}

}  // namespace

YamlNode parseYaml(const std::string& text, const std::string& source) {
  constexpr size_t kMaxNesting = 32;
  YamlNode root;
  root.isMap = true;
  root.line = 1;
  struct Frame {
    int indent;
    YamlNode* map;
  };
  std::vector<Frame> stack;
  YamlNode* pending = nullptr;  // the last "key:" without a value; may open a nested map
  int pendingIndent = -1;

  std::istringstream in(text);
  std::string raw;
  int lineNo = 0;
  while (std::getline(in, raw)) {
    ++lineNo;
    if (!raw.empty() && raw.back() == '\r') raw.pop_back();
    std::string line = stripComment(raw);
    if (trim(line).empty()) continue;
    size_t indent = 0;
    while (indent < line.size() && (line[indent] == ' ' || line[indent] == '\t')) {
      if (line[indent] == '\t') syntaxError(source, lineNo, "tabs are not allowed for indentation");
      ++indent;
    }
    std::string content = trim(line.substr(indent));
    if (indent == 0 && (content == "---" || content == "...")) continue;
    int d = static_cast<int>(indent);

    if (stack.empty()) stack.push_back({d, &root});
    if (pending != nullptr) {
      if (d > pendingIndent) {
        // The schema nests two levels; a bound keeps the nodes' (recursive) destruction shallow.
        if (stack.size() >= kMaxNesting) {
          syntaxError(source, lineNo, "mappings nested deeper than " + std::to_string(kMaxNesting) + " levels");
        }
        pending->isMap = true;
        pending->isNull = false;
        stack.push_back({d, pending});
      }
      pending = nullptr;
    }
    while (stack.size() > 1 && d < stack.back().indent) stack.pop_back();
    if (d != stack.back().indent) {
      syntaxError(
          source, lineNo,
          "bad indentation (" + std::to_string(d) + " spaces; expected " + std::to_string(stack.back().indent) + ")");
    }
    if (content[0] == '-' && (content.size() == 1 || content[1] == ' ')) {
      syntaxError(source, lineNo, "sequences are not supported in the config file");
    }
    size_t colon = findKeyColon(content);
    if (colon == std::string::npos) syntaxError(source, lineNo, "expected 'key: value', got '" + content + "'");
    YamlNode keyNode = parseScalar(content.substr(0, colon), source, lineNo);
    if (keyNode.isNull) syntaxError(source, lineNo, "empty key");
    std::string key = keyNode.scalar;
    YamlNode& map = *stack.back().map;
    if (map.find(key) != nullptr) syntaxError(source, lineNo, "duplicate key '" + key + "'");
    std::string value = trim(content.substr(colon + 1));
    YamlNode node;
    if (value.empty()) {
      node.isNull = true;
      node.line = lineNo;
    } else if (value[0] == '{') {
      node = parseFlowMap(value, source, lineNo);
    } else {
      node = parseScalar(value, source, lineNo);
    }
    map.entries.emplace_back(key, std::move(node));
    if (value.empty()) {
      pending = &map.entries.back().second;
      pendingIndent = d;
    }
  }
  return root;
}

namespace {

// Typed access to one config value, with "<file>:<line>: <section>.<key>: ..." errors.
class Reader {
 public:
  Reader(std::string path) : path_(std::move(path)) {}

  [[noreturn]] void fail(const YamlNode& node, const std::string& where, const std::string& what) const {
    throw UsageError(path_ + ":" + std::to_string(node.line) + ": " + where + ": " + what);
  }

  bool toBool(const YamlNode& n, const std::string& where) const {
    std::string v = n.scalar;
    std::transform(v.begin(), v.end(), v.begin(), [](unsigned char c) { return std::tolower(c); });
    if (v == "true" || v == "yes" || v == "on" || v == "1") return true;
    if (v == "false" || v == "no" || v == "off" || v == "0") return false;
    fail(n, where, "expected true or false, got '" + n.scalar + "'");
  }
  int64_t toInt(const YamlNode& n, const std::string& where) const {
    errno = 0;
    char* end = nullptr;
    long long v = std::strtoll(n.scalar.c_str(), &end, 10);
    if (n.scalar.empty() || errno != 0 || *end != '\0') fail(n, where, "expected an integer, got '" + n.scalar + "'");
    return v;
  }
  double toDouble(const YamlNode& n, const std::string& where) const {
    errno = 0;
    char* end = nullptr;
    double v = std::strtod(n.scalar.c_str(), &end);
    if (n.scalar.empty() || errno != 0 || *end != '\0') fail(n, where, "expected a number, got '" + n.scalar + "'");
    return v;
  }

 private:
  std::string path_;
};

}  // namespace

void applyConfigFile(const std::string& path, Options& o) {
  std::ifstream file(path);
  if (!file) throw UsageError("cannot read config file " + path + ": " + std::strerror(errno));
  std::stringstream buffer;
  buffer << file.rdbuf();
  applyConfigText(buffer.str(), path, o);
}

void applyConfigText(const std::string& contents, const std::string& path, Options& o) {
  YamlNode root = parseYaml(contents, path);
  Reader reader(path);

  // Each known key: section, key, and how to set the option when the command line did not.
  using Setter = std::function<void(const YamlNode&, const std::string&)>;
  auto integer = [&](std::optional<int64_t> Options::* field) -> Setter {
    return [&, field](const YamlNode& n, const std::string& w) {
      if (!(o.*field).has_value()) o.*field = reader.toInt(n, w);
    };
  };
  auto number = [&](std::optional<double> Options::* field) -> Setter {
    return [&, field](const YamlNode& n, const std::string& w) {
      if (!(o.*field).has_value()) o.*field = reader.toDouble(n, w);
    };
  };
  auto boolean = [&](std::optional<bool> Options::* field) -> Setter {
    return [&, field](const YamlNode& n, const std::string& w) {
      if (!(o.*field).has_value()) o.*field = reader.toBool(n, w);
    };
  };
  auto text = [&](std::optional<std::string> Options::* field) -> Setter {
    return [&, field](const YamlNode& n, const std::string&) {
      if (!(o.*field).has_value()) o.*field = n.scalar;
    };
  };
  struct Known {
    const char* section;
    const char* key;
    Setter set;
  };
  const std::vector<Known> known = {
      {"params", "fusion_threshold_mb", integer(&Options::fusionThresholdMb)},
      {"params", "cycle_time_ms", number(&Options::cycleTimeMs)},
      {"params", "cache_capacity", integer(&Options::cacheCapacity)},
      {"params", "hierarchical_allreduce", boolean(&Options::hierarchicalAllreduce)},
      {"params", "hierarchical_allgather", boolean(&Options::hierarchicalAllgather)},
      {"params", "torus_allreduce", boolean(&Options::torusAllreduce)},
      {"autotune", "enabled", boolean(&Options::autotune)},
      {"autotune", "log_file", text(&Options::autotuneLogFile)},
      {"autotune", "warmup_samples", integer(&Options::autotuneWarmupSamples)},
      {"autotune", "steps_per_sample", integer(&Options::autotuneStepsPerSample)},
      {"autotune", "bayes_opt_max_samples", integer(&Options::autotuneBayesOptMaxSamples)},
      {"autotune", "gaussian_process_noise", number(&Options::autotuneGaussianProcessNoise)},
      {"timeline", "filename", text(&Options::timelineFilename)},
      {"timeline", "mark_cycles", boolean(&Options::timelineMarkCycles)},
      {"stall_check", "enabled", boolean(&Options::stallCheck)},
      {"stall_check", "warning_time_seconds", integer(&Options::stallCheckWarningTimeSeconds)},
      {"stall_check", "shutdown_time_seconds", integer(&Options::stallCheckShutdownTimeSeconds)},
      {"library_options", "mpi_threads_disable", boolean(&Options::mpiThreadsDisable)},
      {"library_options", "num_nccl_streams", integer(&Options::numNcclStreams)},
      {"library_options", "thread_affinity", integer(&Options::threadAffinity)},
      {"library_options", "gloo_timeout_seconds", integer(&Options::glooTimeoutSeconds)},
      {"logging", "level",
       [&](const YamlNode& n, const std::string& w) {
         if (o.logLevel.has_value()) return;
         std::string v = n.scalar;
         std::transform(v.begin(), v.end(), v.begin(), [](unsigned char c) { return std::toupper(c); });
         static const char* kLevels[] = {"TRACE", "DEBUG", "INFO", "WARNING", "ERROR", "FATAL"};
         for (const char* level : kLevels) {
           if (v == level) {
             o.logLevel = v;
             return;
           }
         }
         reader.fail(n, w, "expected one of TRACE, DEBUG, INFO, WARNING, ERROR, FATAL, got '" + n.scalar + "'");
       }},
      {"logging", "with_timestamp", boolean(&Options::logWithTimestamp)},
  };

  for (const auto& [sectionName, section] : root.entries) {
    if (sectionName == "controller") {
      if (section.isNull) continue;
      if (section.isMap) reader.fail(section, "controller", "expected gloo or mpi");
      std::string v = section.scalar;
      std::transform(v.begin(), v.end(), v.begin(), [](unsigned char c) { return std::tolower(c); });
      if (v != "gloo" && v != "mpi") throw UsageError("No such controller supported: " + section.scalar);
      if (o.controller == Controller::kDefault) o.controller = v == "gloo" ? Controller::kGloo : Controller::kMpi;
      continue;
    }
    bool sectionKnown = false;
    for (const auto& k : known) sectionKnown = sectionKnown || sectionName == k.section;
    if (!sectionKnown) {
      std::cerr << "horovodrun: warning: " << path << ":" << section.line << ": unknown section '" << sectionName
                << "' ignored\n";
      continue;
    }
    if (section.isNull) continue;
    if (!section.isMap) reader.fail(section, sectionName, "expected a mapping of settings");
    for (const auto& [key, value] : section.entries) {
      std::string where = sectionName + "." + key;
      const Known* match = nullptr;
      for (const auto& k : known) {
        if (sectionName == k.section && key == k.key) match = &k;
      }
      if (match == nullptr) {
        std::cerr << "horovodrun: warning: " << path << ":" << value.line << ": unknown setting '" << where
                  << "' ignored\n";
        continue;
      }
      if (value.isNull) continue;
      if (value.isMap) reader.fail(value, where, "expected a value, got a mapping");
      match->set(value, where);
    }
    // Horovod (config_parser.set_args_from_config): a non-empty stall_check section sets the
    // check to its `enabled` value, true when absent, unless the command line gave
    // --stall-check or --no-stall-check.
    if (sectionName == "stall_check" && !section.entries.empty() && !o.stallCheck.has_value()) {
      o.stallCheck = true;
    }
  }
}

}  // namespace hvd::launcher
