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

void raisePeerLost(const PeerLost& e) {
  PyObject* cls = peerLostError();
  PyObject* exc = PyObject_CallFunction(cls, "s", e.what());
  if (exc == nullptr) return;  // the constructor's error is raised instead
  PyObject* rank = PyLong_FromLong(e.rank());
  if (rank != nullptr) {
    PyObject_SetAttrString(exc, "rank", rank);
    Py_DECREF(rank);
  }
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
      raisePeerLost(e);
    } catch (const RemovedFromJob& e) {
      PyErr_SetString(removedError(), e.what());
    } catch (const Error& e) {
      PyErr_SetString(internalError(), e.what());
    }
  });
}

}  // namespace hvd::py
