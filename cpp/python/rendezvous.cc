#include "rendezvous.h"

#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <chrono>
#include <optional>
#include <string>
#include <utility>

#include "horovod/rendezvous.h"

namespace hvd::py {
namespace nb = nanobind;
using namespace nb::literals;

namespace {

PyObject* secretRefusedClass = nullptr;  // the module's RendezvousSecretRefused (kept forever)

// Runs `call` without the GIL; turns the store's errors into Python's (see rendezvous.h).
// `listening`: a failure is the server's failure to listen (OSError).
template <typename Call>
auto withoutGil(Call&& call, bool listening = false) -> decltype(call()) {
  PyObject* type = nullptr;
  std::string message;
  {
    nb::gil_scoped_release release;
    try {
      return call();
    } catch (const RendezvousRefused& e) {
      type = secretRefusedClass;
      message = e.what();
    } catch (const Error& e) {
      type = listening ? PyExc_OSError : PyExc_ConnectionError;
      message = e.what();
    }
  }
  PyErr_SetString(type, message.c_str());
  throw nb::python_error();
}

std::chrono::milliseconds millis(double seconds) {
  if (!(seconds >= 0)) throw nb::value_error("a timeout must be a non-negative number of seconds");
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000.0));
}

std::string text(const nb::bytes& b) { return std::string(b.c_str(), b.size()); }

std::optional<nb::bytes> toBytes(const std::optional<std::string>& value) {
  if (!value) return std::nullopt;
  return nb::bytes(value->data(), value->size());
}

}  // namespace

void registerRendezvous(nb::module_& m) {
  nb::object refused = nb::steal(
      PyErr_NewException("horovod._core.RendezvousSecretRefused", PyExc_ConnectionError, nullptr));
  if (!refused.is_valid()) throw nb::python_error();
  secretRefusedClass = refused.inc_ref().ptr();
  m.attr("RendezvousSecretRefused") = refused;

  nb::class_<RendezvousServer>(m, "RendezvousServer")
      .def(
          "__init__",
          [](RendezvousServer* self, const nb::bytes& secret, const std::string& bindHost,
             int port) {
            if (port < 0 || port > 65535) throw nb::value_error("port must be in 0..65535");
            std::string s = text(secret);
            withoutGil(
                [&] { new (self) RendezvousServer(bindHost, static_cast<uint16_t>(port), s); },
                true);
          },
          "secret"_a, "bind_host"_a, "port"_a = 0)
      .def_prop_ro("port", [](const RendezvousServer& s) { return s.port(); })
      .def_prop_ro("refused", [](const RendezvousServer& s) { return s.refusedConnections(); })
      .def("shutdown", [](RendezvousServer& s) { withoutGil([&] { s.shutdown(); }); })
      .def(
          "set",
          [](RendezvousServer& s, const std::string& key, const nb::bytes& value) {
            std::string v = text(value);
            withoutGil([&] { s.set(key, v); });
          },
          "key"_a, "value"_a)
      .def(
          "add",
          [](RendezvousServer& s, const std::string& key, int64_t delta) {
            return withoutGil([&] { return s.add(key, delta); });
          },
          "key"_a, "delta"_a)
      .def(
          "try_get",
          [](RendezvousServer& s, const std::string& key) {
            return toBytes(withoutGil([&] { return s.tryGet(key); }));
          },
          "key"_a);

  nb::class_<RendezvousClient>(m, "RendezvousClient")
      .def(
          "__init__",
          [](RendezvousClient* self, const std::string& host, int port, const nb::bytes& secret,
             double connectTimeoutS) {
            if (port <= 0 || port > 65535) throw nb::value_error("port must be in 1..65535");
            std::string s = text(secret);
            auto timeout = millis(connectTimeoutS);
            withoutGil([&] {
              new (self) RendezvousClient(host, static_cast<uint16_t>(port), s, timeout);
            });
          },
          "host"_a, "port"_a, "secret"_a, "connect_timeout_s"_a)
      .def(
          "set",
          [](RendezvousClient& c, const std::string& key, const nb::bytes& value) {
            std::string v = text(value);
            withoutGil([&] { c.set(key, v); });
          },
          "key"_a, "value"_a)
      .def(
          "add",
          [](RendezvousClient& c, const std::string& key, int64_t delta) {
            return withoutGil([&] { return c.add(key, delta); });
          },
          "key"_a, "delta"_a)
      .def(
          "get",
          [](RendezvousClient& c, const std::string& key, double timeoutS) {
            auto timeout = millis(timeoutS);
            return toBytes(withoutGil([&] { return c.get(key, timeout); }));
          },
          "key"_a, "timeout_s"_a);
}

}  // namespace hvd::py
