#include "errors.h"

#include <exception>
#include <string>

#include "horovod/errors.h"

namespace hvd::py {
namespace nb = nanobind;
namespace {

// Borrowed forever once found (never released: the interpreter may already be finalizing).
PyObject* exceptionClass(const char* name) {
  PyObject* mod = PyImport_ImportModule("horovod.common.exceptions");
  if (mod == nullptr) {
    PyErr_Clear();
    return PyExc_RuntimeError;
  }
  PyObject* cls = PyObject_GetAttrString(mod, name);
  Py_DECREF(mod);
  if (cls == nullptr) {
    PyErr_Clear();
    return PyExc_RuntimeError;
  }
  return cls;  // new reference, intentionally kept
}

PyObject* internalError() {
  static PyObject* cls = exceptionClass("HorovodInternalError");
  return cls;
}

PyObject* removedError() {
  static PyObject* cls = exceptionClass("HorovodRemovedError");
  return cls;
}

PyObject* peerLostError() {
  static PyObject* cls = exceptionClass("HorovodPeerLostError");
  return cls;
}

// Raises an instance of `cls` with the core's message, its ErrorCode as `.code` and, for PeerLost,
// the lost rank as `.rank` (code that tells errors apart tests these, never the message).
void raiseWithCode(PyObject* cls, const Error& e, const PeerLost* lost = nullptr) {
  PyObject* exc = PyObject_CallFunction(cls, "s", e.what());
  if (exc == nullptr) return;  // the constructor's error is raised instead
  auto setInt = [exc](const char* attr, long value) {
    PyObject* number = PyLong_FromLong(value);
    if (number == nullptr) return;
    PyObject_SetAttrString(exc, attr, number);
    Py_DECREF(number);
  };
  setInt("code", static_cast<long>(e.code()));
  if (lost != nullptr) setInt("rank", lost->rank());
  PyErr_Clear();
  PyErr_SetObject(cls, exc);
  Py_DECREF(exc);
}

}  // namespace

void registerErrorTranslator() {
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const InvalidArgument& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    } catch (const PeerLost& e) {
      raiseWithCode(peerLostError(), e, &e);
    } catch (const RemovedFromJob& e) {
      raiseWithCode(removedError(), e);
    } catch (const Error& e) {
      raiseWithCode(internalError(), e);
    }
  });
}

}  // namespace hvd::py
