#include "hosts.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>

#include "options.h"

namespace hvd::launcher {
namespace {

constexpr const char* kInvalidHosts = "Invalid host input, please make sure it has format as : worker-0:2,worker-1:2.";

bool validHostName(const std::string& name) {
  if (name.empty()) return false;
  for (char c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '.' && c != '-') return false;
  }
  return true;
}

// The largest slot count of one host: what nine digits hold (parseCount's limit), also for a
// host listed several times.
constexpr int kMaxHostSlots = 999999999;

bool parseCount(const std::string& text, int& out) {
  if (text.empty() || text.size() > 9) return false;
  for (char c : text) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  }
  out = std::atoi(text.c_str());
  return true;
}

void addHost(std::vector<HostSlots>& hosts, const std::string& host, int slots) {
  for (auto& h : hosts) {
    if (h.host == host) {
      if (h.slots > kMaxHostSlots - slots) {
        throw UsageError("host " + host + " is listed with more than " + std::to_string(kMaxHostSlots) +
                         " slots in all");
      }
      h.slots += slots;
      return;
    }
  }
  hosts.push_back({host, slots});
}

}  // namespace

std::vector<HostSlots> parseHosts(const std::string& text) {
  std::vector<HostSlots> hosts;
  std::stringstream in(text);
  std::string item;
  bool any = false;
  while (std::getline(in, item, ',')) {
    any = true;
    size_t colon = item.rfind(':');
    int slots = 0;
    if (colon == std::string::npos || !validHostName(item.substr(0, colon)) ||
        !parseCount(item.substr(colon + 1), slots)) {
      throw UsageError(kInvalidHosts + std::string(" (got '") + item + "')");
    }
    addHost(hosts, item.substr(0, colon), slots);
  }
  if (!any || text.back() == ',') throw UsageError(kInvalidHosts + std::string(" (got '") + text + "')");
  return hosts;
}

std::vector<HostSlots> parseHostfile(const std::string& path) {
  std::ifstream file(path);
  if (!file) throw UsageError("cannot read hostfile " + path + ": " + std::strerror(errno));
  std::stringstream text;
  text << file.rdbuf();
  return parseHostfileText(text.str(), path);
}

std::vector<HostSlots> parseHostfileText(const std::string& text, const std::string& path) {
  std::istringstream file(text);
  std::vector<HostSlots> hosts;
  std::string line;
  int lineNo = 0;
  while (std::getline(file, line)) {
    ++lineNo;
    if (auto hash = line.find('#'); hash != std::string::npos) line.resize(hash);
    std::istringstream words(line);
    std::string host;
    if (!(words >> host)) continue;
    auto bad = [&](const std::string& why) {
      return UsageError(path + ":" + std::to_string(lineNo) + ": " + why + " (expected '<hostname> slots=<n>', got '" +
                        line + "')");
    };
    if (!validHostName(host)) throw bad("invalid host name '" + host + "'");
    int slots = 1;
    std::string word;
    while (words >> word) {
      // "slots = 4" is accepted too: join the spaced form.
      if (word == "slots" || word == "slots=") {
        std::string rest;
        while (words >> rest) word += rest;
      }
      if (word.rfind("slots=", 0) == 0) {
        if (!parseCount(word.substr(6), slots)) throw bad("invalid slot count '" + word.substr(6) + "'");
      } else if (word.rfind("max_slots=", 0) == 0) {
        continue;  // mpirun hostfile syntax; the cap does not matter here
      } else {
        throw bad("unexpected '" + word + "'");
      }
    }
    try {
      addHost(hosts, host, slots);
    } catch (const UsageError& e) {
      throw bad(e.what());
    }
  }
  if (hosts.empty()) throw UsageError("hostfile " + path + " lists no hosts");
  return hosts;
}

std::vector<HostSlots> parseDiscoveredHosts(const std::string& output, int defaultSlots) {
  std::vector<HostSlots> hosts;
  std::istringstream in(output);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream words(line);
    std::string item;
    if (!(words >> item)) continue;
    std::string host = item;
    int slots = defaultSlots;
    if (size_t colon = item.rfind(':'); colon != std::string::npos) {
      host = item.substr(0, colon);
      if (!parseCount(item.substr(colon + 1), slots)) {
        throw UsageError("host discovery script printed an invalid line: '" + line + "'");
      }
    }
    if (!validHostName(host)) throw UsageError("host discovery script printed an invalid host: '" + line + "'");
    bool found = false;
    for (auto& h : hosts) {
      if (h.host == host) {
        h.slots = slots;
        found = true;
      }
    }
    if (!found) hosts.push_back({host, slots});
  }
  return hosts;
}

std::vector<SlotInfo> assignSlots(const std::vector<HostSlots>& hosts, int np) {
  int available = totalSlots(hosts);
  if (np > available) {
    throw UsageError("Requested more processes (" + std::to_string(np) + ") than there are available slots (" +
                     std::to_string(available) + ")");
  }
  return elastic::fillSlots(hosts, np);
}

}  // namespace hvd::launcher
