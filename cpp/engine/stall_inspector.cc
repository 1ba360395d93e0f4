#include "engine/stall_inspector.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <sstream>

namespace hvd::engine {
namespace {

// Names listed per missing rank before the list is cut short.
constexpr size_t kMaxNamesPerRank = 32;

std::string seconds(std::chrono::milliseconds d) {
  char text[32];
  if (d.count() % 1000 == 0) {
    std::snprintf(text, sizeof(text), "%lld", static_cast<long long>(d.count() / 1000));
  } else {
    std::snprintf(text, sizeof(text), "%g", static_cast<double>(d.count()) / 1000.0);
  }
  return text;
}

std::string rankList(const std::vector<int>& ranks) {
  std::string out = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) out += (i ? ", " : "") + std::to_string(ranks[i]);
  return out;
}

bool contains(const std::vector<int>& ranks, int r) { return std::find(ranks.begin(), ranks.end(), r) != ranks.end(); }

}  // namespace

StallInspector::StallInspector(StallOptions options) : options_(options) {
  auto quarter = options_.checkTime / 4;
  interval_ =
      std::clamp<std::chrono::milliseconds>(quarter, std::chrono::milliseconds(10), std::chrono::milliseconds(1000));
  if (!options_.enabled) interval_ = std::chrono::milliseconds(1000);
}

std::string_view StallInspector::baseName(std::string_view name, Kind op) {
  std::string prefix(kindName(op));
  for (auto& c : prefix) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  prefix += '.';
  if (name.starts_with("grouped_") && name.substr(8).starts_with(prefix)) return name.substr(8 + prefix.size());
  if (name.starts_with(prefix)) return name.substr(prefix.size());
  return name;
}

StallInspector::Verdict StallInspector::scan(std::span<const PendingTensor> pending, int64_t nowNs) {
  Verdict verdict;
  // Ages: submissions seen before keep their first time; the others start now.
  std::map<Key, int64_t> since;
  std::vector<int64_t> ages(pending.size(), 0);
  for (size_t i = 0; i < pending.size(); ++i) {
    const PendingTensor& t = pending[i];
    Key key{t.processSet, std::string(t.name), t.cached, t.instance};
    auto old = since_.find(key);
    const int64_t first = old != since_.end() ? old->second : nowNs;
    ages[i] = nowNs - first;
    since.emplace(std::move(key), first);
  }
  since_.swap(since);

  findDivergence(pending, verdict);
  if (!options_.enabled) return verdict;

  const int64_t checkNs = std::chrono::nanoseconds(options_.checkTime).count();
  std::vector<size_t> stalled;
  for (size_t i = 0; i < pending.size(); ++i) {
    if (ages[i] >= checkNs && !pending[i].missing.empty()) stalled.push_back(i);
  }
  if (stalled.empty()) return verdict;
  const bool warnNow = lastWarningNs_ == 0 || nowNs - lastWarningNs_ >= checkNs;
  std::string text = report(pending, stalled, ages);
  if (warnNow) {
    verdict.warning = text;
    lastWarningNs_ = nowNs;
  }
  if (options_.shutdownTime.count() > 0) {
    if (options_.shutdownTime < options_.checkTime) {
      if (!warnedShutdownIgnored_) {
        warnedShutdownIgnored_ = true;
        verdict.warning +=
            (verdict.warning.empty() ? "" : "\n") + std::string(
                                                        "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS is less than "
                                                        "HOROVOD_STALL_CHECK_TIME_SECONDS, will not shutdown.");
      }
    } else {
      const int64_t shutdownNs = std::chrono::nanoseconds(options_.shutdownTime).count();
      bool over = std::any_of(stalled.begin(), stalled.end(), [&](size_t i) { return ages[i] >= shutdownNs; });
      if (over) {
        verdict.shutdown =
            "Horovod is shutting down: one or more tensors waited for the remaining ranks for more "
            "than HOROVOD_STALL_SHUTDOWN_TIME_SECONDS=" +
            seconds(options_.shutdownTime) + " seconds. " + text;
      }
    }
  }
  return verdict;
}

std::string StallInspector::report(std::span<const PendingTensor> pending, const std::vector<size_t>& stalled,
                                   const std::vector<int64_t>& ages) const {
  // Horovod's message first (the missing ranks, each with the tensors it holds up), then who
  // submitted each stalled tensor.
  std::map<int, std::vector<std::string_view>> byRank;
  for (size_t i : stalled) {
    for (int r : pending[i].missing) byRank[r].push_back(pending[i].name);
  }
  std::ostringstream out;
  out << "One or more tensors were submitted to be reduced, gathered or broadcasted by subset of ranks and are "
         "waiting for remainder of ranks for more than "
      << seconds(options_.checkTime)
      << " seconds. This may indicate that different ranks are trying to submit different tensors or that only "
         "subset of ranks is submitting tensors, which will cause deadlock. \nMissing ranks:";
  for (auto& [rank, names] : byRank) {
    std::sort(names.begin(), names.end());
    out << "\n" << rank << ": [";
    for (size_t i = 0; i < names.size() && i < kMaxNamesPerRank; ++i) out << (i ? ", " : "") << names[i];
    if (names.size() > kMaxNamesPerRank) out << ", ... (" << names.size() - kMaxNamesPerRank << " more)";
    out << "]";
  }
  out << "\nStalled tensors:";
  size_t listed = 0;
  for (size_t i : stalled) {
    if (++listed > kMaxNamesPerRank) {
      out << "\n... (" << stalled.size() - kMaxNamesPerRank << " more)";
      break;
    }
    const PendingTensor& t = pending[i];
    out << "\n" << t.name << " (" << kindName(t.op);
    if (t.processSet != 0) out << ", process set " << t.processSet;
    out << "): submitted by " << rankList(t.submitted) << ", missing " << rankList(t.missing) << ", waiting "
        << ages[i] / 1000000000 << " s";
  }
  return out.str();
}

void StallInspector::findDivergence(std::span<const PendingTensor> pending, Verdict& verdict) {
  std::set<std::string> diverged;
  if (pending.size() < 2) {
    divergedBefore_.clear();
    return;
  }
  std::map<std::string_view, std::vector<size_t>> byBase;
  for (size_t i = 0; i < pending.size(); ++i) byBase[baseName(pending[i].name, pending[i].op)].push_back(i);
  for (const auto& [base, members] : byBase) {
    if (members.size() < 2) continue;
    // Disjoint submitters, and each variant's missing ranks all sit in another variant.
    bool deadlock = true;
    std::vector<int> all;
    for (size_t m : members) {
      for (int r : pending[m].submitted) {
        if (contains(all, r)) deadlock = false;
        all.push_back(r);
      }
    }
    for (size_t m = 0; deadlock && m < members.size(); ++m) {
      for (int r : pending[members[m]].missing) {
        if (!contains(all, r)) deadlock = false;
      }
    }
    if (!deadlock) continue;
    std::ostringstream signature;
    std::ostringstream message;
    message << "Mismatched operations for '" << base << "': ranks submitted different operations under this name, "
            << "so each waits for the others forever (";
    for (size_t m = 0; m < members.size(); ++m) {
      const PendingTensor& t = pending[members[m]];
      signature << t.processSet << '/' << t.name << '/' << t.cached << '/' << t.instance << ';';
      message << (m ? "; " : "") << kindName(t.op) << " '" << t.name << "'";
      if (t.processSet != 0) message << " in process set " << t.processSet;
      message << ": " << rankList(t.submitted);
    }
    message << ").";
    std::string sig = signature.str();
    if (divergedBefore_.count(sig) != 0) {
      for (size_t m : members) {
        verdict.diverged.push_back(Failed{pending[m].processSet, std::string(pending[m].name)});
        verdict.divergence.push_back(message.str());
      }
    } else {
      diverged.insert(std::move(sig));
    }
  }
  divergedBefore_.swap(diverged);
}

}  // namespace hvd::engine
