#include "elastic_rounds.h"

#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <chrono>
#include <optional>
#include <string>

#include "horovod/elastic_rounds.h"

namespace hvd::py {
namespace nb = nanobind;
using namespace nb::literals;

namespace {

std::chrono::milliseconds millis(double seconds, const char* name) {
  if (!(seconds > 0))
    throw nb::value_error((std::string(name) + " must be a positive number of seconds").c_str());
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000.0));
}

const char* kindName(ElasticAction::Kind kind) {
  switch (kind) {
    case ElasticAction::Kind::kLog: return "log";
    case ElasticAction::Kind::kLaunch: return "launch";
    case ElasticAction::Kind::kStart: return "start";
    case ElasticAction::Kind::kKill: return "kill";
    case ElasticAction::Kind::kFinish: return "finish";
  }
  return "?";
}

// The policy's calls read and write the store: without the GIL, store errors as ConnectionError.
template <typename Call>
auto withoutGil(Call&& call) -> decltype(call()) {
  std::string message;
  {
    nb::gil_scoped_release release;
    try {
      return call();
    } catch (const Error& e) {
      message = e.what();
    }
  }
  PyErr_SetString(PyExc_ConnectionError, message.c_str());
  throw nb::python_error();
}

}  // namespace

void registerElasticRounds(nb::module_& m) {
  nb::class_<ElasticAction>(m, "ElasticAction")
      .def_prop_ro("kind", [](const ElasticAction& a) { return kindName(a.kind); })
      .def_ro("id", &ElasticAction::id)
      .def_ro("host", &ElasticAction::host)
      .def_ro("text", &ElasticAction::text)
      .def_ro("reason", &ElasticAction::reason)
      .def_ro("needed", &ElasticAction::needed)
      .def_ro("have", &ElasticAction::have)
      .def_prop_ro("rank", [](const ElasticAction& a) { return a.slot.rank; })
      .def_prop_ro("size", [](const ElasticAction& a) { return a.slot.size; })
      .def_prop_ro("local_rank", [](const ElasticAction& a) { return a.slot.localRank; })
      .def_prop_ro("local_size", [](const ElasticAction& a) { return a.slot.localSize; })
      .def_prop_ro("cross_rank", [](const ElasticAction& a) { return a.slot.crossRank; })
      .def_prop_ro("cross_size", [](const ElasticAction& a) { return a.slot.crossSize; })
      .def("__repr__", [](const ElasticAction& a) {
        return std::string("ElasticAction(") + kindName(a.kind) + ", id=" + std::to_string(a.id) +
               ", text=" + a.text + ")";
      });

  nb::class_<ElasticBlacklist>(m, "ElasticBlacklist")
      .def(
          "__init__",
          [](ElasticBlacklist* self, std::optional<std::pair<double, double>> cooldownRange) {
            if (cooldownRange &&
                !(0 < cooldownRange->first && cooldownRange->first <= cooldownRange->second)) {
              throw nb::value_error(
                  "cooldown_range must be (min, max) seconds with 0 < min <= max");
            }
            new (self) ElasticBlacklist(cooldownRange);
          },
          "cooldown_range"_a = nb::none())
      .def("blacklisted", &ElasticBlacklist::blacklisted, "host"_a)
      .def(
          "advance_clock",
          [](ElasticBlacklist& b, double seconds) {
            if (!(seconds >= 0))
              throw nb::value_error("advance_clock: seconds must not be negative");
            b.advanceClock(std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000.0)));
          },
          "seconds"_a);

  nb::class_<ElasticRounds>(m, "ElasticRounds")
      .def(
          "__init__",
          [](ElasticRounds* self, RendezvousServer& server, const ElasticBlacklist& blacklist,
             int startWorkers, int minWorkers, std::optional<int> maxWorkers,
             std::optional<int> resetLimit, double elasticTimeoutS, double gatherTimeoutS,
             double replaceGraceS, int firstId) {
            if (minWorkers < 1) throw nb::value_error("min_workers must be at least 1");
            if (maxWorkers && *maxWorkers < minWorkers)
              throw nb::value_error("max_workers must not be below min_workers");
            if (resetLimit && *resetLimit < 0)
              throw nb::value_error("reset_limit must not be negative");
            if (!(replaceGraceS >= 0))
              throw nb::value_error("replace_grace_s must not be negative");
            ElasticRoundSettings s;
            s.startWorkers = startWorkers;
            s.minWorkers = minWorkers;
            s.maxWorkers = maxWorkers;
            s.resetLimit = resetLimit;
            s.elasticTimeout = millis(elasticTimeoutS, "elastic_timeout_s");
            s.gatherTimeout = millis(gatherTimeoutS, "gather_timeout_s");
            s.replaceGrace =
                std::chrono::milliseconds(static_cast<int64_t>(replaceGraceS * 1000.0));
            s.firstId = firstId;
            new (self) ElasticRounds(server, s, blacklist);
          },
          "server"_a, "blacklist"_a, "start_workers"_a, "min_workers"_a, "max_workers"_a,
          "reset_limit"_a, "elastic_timeout_s"_a, "gather_timeout_s"_a, "replace_grace_s"_a,
          "first_id"_a, nb::keep_alive<1, 2>())
      .def("capacity", &ElasticRounds::capacity, "room"_a)
      .def("worker_landed", &ElasticRounds::workerLanded, "worker_id"_a, "host"_a)
      .def(
          "worker_exited",
          [](ElasticRounds& r, int id, bool success, const std::string& how) {
            withoutGil([&] { r.workerExited(id, success, how); });
          },
          "worker_id"_a, "success"_a, "how"_a)
      .def(
          "fail",
          [](ElasticRounds& r, const std::string& message) {
            withoutGil([&] { r.fail(message); });
          },
          "message"_a)
      .def("tick", [](ElasticRounds& r) { return withoutGil([&] { return r.tick(); }); })
      .def("members", &ElasticRounds::members)
      .def_prop_ro("wants_room", &ElasticRounds::wantsRoom)
      .def_prop_ro("keep_running", &ElasticRounds::keepRunning)
      .def_prop_ro("exit_code", &ElasticRounds::exitCode)
      .def_prop_ro("next_id", &ElasticRounds::nextId);
}

}  // namespace hvd::py
