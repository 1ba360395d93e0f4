// The elastic driver's policy (which workers form each round, when a round ends, the job's
// verdict) for programs whose workers a framework starts and places: horovod.ray's and
// horovod.spark's elastic jobs. It is the policy horovodrun's elastic driver runs, in its
// "landed" placement mode: the owner launches workers wherever the framework has room and
// reports where each landed; the driver forms every round from those hosts (a host's workers
// get consecutive ranks; survivors first, in their old rank order, so rank 0 holds the state),
// publishes the assignments on the RendezvousServer's store and reads the workers' init()
// counters there. docs/elastic.md describes the rounds. With a cooldown range (ElasticBlacklist),
// the host of a failed worker is blacklisted for a cooldown (horovodrun's rule) and the owner
// keeps new workers off it (ElasticBlacklist::blacklisted); without one, no host is.
//
// The owner's loop: report events (capacity, workerLanded, workerExited), call tick(), execute
// the actions it returns in order, repeat every few tens of milliseconds. One thread at a time.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "horovod/rendezvous.h"

namespace hvd {

struct ElasticRoundSettings {
  int startWorkers = 1;            // the first round waits for this many
  int minWorkers = 1;              // later rounds need this many
  std::optional<int> maxWorkers;   // none: as many as there is room for
  std::optional<int> resetLimit;   // none: unlimited
  std::chrono::milliseconds elasticTimeout{600000};  // for enough room, per round
  std::chrono::milliseconds gatherTimeout{30000};    // for every live worker to ask for the next round
  // How long a later round waits for the room to replace its lost workers before it forms smaller.
  std::chrono::milliseconds replaceGrace{5000};
  int firstId = 0;                 // worker ids start here (never reuse ids on one store)
};

// The hosts an owner's elastic jobs blacklisted, kept from one job (ElasticRounds) to the next,
// as the hosts are. Copies share one blacklist.
class ElasticBlacklist {
 public:
  // cooldownRange: (lo, hi) seconds, the n-th blacklisting of a host (n from 0) lasting
  // clamp(lo * 2^n + U(0,1) * lo, lo, hi) s; nullopt: no host is ever blacklisted.
  explicit ElasticBlacklist(std::optional<std::pair<double, double>> cooldownRange);
  // Whether `host` is blacklisted now: launch no worker there.
  bool blacklisted(const std::string& host) const;
  // Moves this blacklist's clock (and its jobs' from then on) forward: a cooldown ends without
  // waiting for it (tests).
  void advanceClock(std::chrono::milliseconds by);

 private:
  friend class ElasticRounds;
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

struct ElasticAction {
  enum class Kind {
    kLog,     // text: a line for the user
    kLaunch,  // launch worker `id` where the framework has room; report workerLanded()
    kStart,   // run worker `id` as `slot` of the round (its assignment is published)
    kKill,    // kill worker `id` (it did not ask for the next round in time)
    kFinish,  // the job failed with `text`: stop every worker
  };
  Kind kind = Kind::kLog;
  int id = -1;
  ElasticSlot slot{.rank = 0, .size = 0, .localRank = 0, .localSize = 0, .crossRank = 0, .crossSize = 0};
  std::string host;    // kStart: the host the worker landed on (as reported)
  std::string text;
  // kFinish: "timed_out" (then `needed` workers were needed and `have` possible: owners word
  // this one in their own terms), "reset_limit", "round_failed", "no_survivors" or "other".
  std::string reason;
  int needed = 0;
  int have = 0;
};

class ElasticRounds {
 public:
  // `server` serves the job's store and must outlive this object; `blacklist` is shared.
  ElasticRounds(RendezvousServer& server, const ElasticRoundSettings& settings, const ElasticBlacklist& blacklist);
  ~ElasticRounds();
  ElasticRounds(const ElasticRounds&) = delete;
  ElasticRounds& operator=(const ElasticRounds&) = delete;

  // How many more workers could start now. Report it whenever wantsRoom(): a round launches
  // new workers only after such a report.
  void capacity(int room);
  // Whether the next round waits for room (a capacity() report).
  bool wantsRoom() const;
  // Launched worker `id` runs on `host` (equal strings: the same host).
  void workerLanded(int id, const std::string& host);
  // Worker `id`'s function ended: returned (`success`) or failed, `how` says how.
  void workerExited(int id, bool success, const std::string& how);
  // Ends the job with `message` (the owner cannot go on, e.g. workers could not be placed).
  void fail(const std::string& message);
  // Advances the rounds; returns every action left since the last call, oldest first.
  std::vector<ElasticAction> tick();

  // The live workers of the latest round: (id, rank), by rank.
  std::vector<std::pair<int, int>> members() const;
  // False once workers completed training or the job failed.
  bool keepRunning() const;
  // 0 when workers completed, 1 when the job failed.
  int exitCode() const;
  // The id the next new worker gets.
  int nextId() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace hvd
