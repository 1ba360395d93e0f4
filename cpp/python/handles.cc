#include "handles.h"

#include <nanobind/stl/string.h>

#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "arrays.h"
#include "errors.h"
#include "work.h"

namespace hvd::py {
namespace {

// An array argument of the fast path: a DLPack capsule read in place (the usual case) or, for
// any other array object, nanobind's import of it. Either keeps the memory alive.
struct Held {
  nb::object capsule;
  nb::ndarray<> array;

  // Fills `view` from `obj`; throws InvalidArgument (ValueError) if it is no usable array.
  // `stream`: the producer stream of a device tensor (arrays.h).
  void take(nb::handle obj, TensorView& view, const char* what, nb::handle stream) {
    if (viewOfCapsule(obj, view, what, stream)) {
      capsule = nb::borrow(obj);
      return;
    }
    if (!nb::try_cast<nb::ndarray<>>(obj, array)) {
      throw InvalidArgument(std::string(what) + ": expected a DLPack capsule or an array, got " +
                            Py_TYPE(obj.ptr())->tp_name);
    }
    view = toView(array, what, stream);
  }
  bool held() const { return capsule.is_valid() || array.is_valid(); }
};

// One pending operation. Either `work` (+ the arrays it reads and writes) was enqueued here by the
// fast path, or `pyWork` is a Work object the adapter made with one of the *_async bindings.
struct Slot {
  WorkPtr work;
  Held in, out;
  nb::object pyWork;
  nb::object payload;
  int kind = 0;

  Slot() = default;
  Slot(Slot&&) noexcept = default;
  Slot& operator=(Slot&&) noexcept = default;
  // A slot dropped while its operation runs (reset, interrupted wait) parks its arrays.
  ~Slot() {
    if (work && !work->isCompleted() && (in.held() || out.held())) {
      for (Held* h : {&in, &out}) {
        std::vector<nb::ndarray<>> arrays;
        if (h->array.is_valid()) arrays.push_back(std::move(h->array));
        parkOrphan(work, std::move(arrays), std::move(h->capsule));
      }
    }
  }
};

// Scratch of the fast path, reused so that a call allocates no shape vector and no name string
// of its own. A call re-entered from Python code that the outer call ran (a name's __bool__, an
// array's __dlpack__) uses a scratch of its own.
struct Scratch {
  TensorView in, out;
  Options options;
  bool busy = false;
};

// Python's `prefix + name if name else prefix + unnamed + str(handle)` (horovod.common.naming's
// op_name), into `full`. Returns whether the name was generated (a one-off name:
// Options::oneOffName).
bool fullName(std::string& full, const std::string& prefix, const std::string& unnamed,
              nb::handle name, int64_t handle) {
  full.assign(prefix);
  if (!name.is_none()) {
    if (PyUnicode_Check(name.ptr())) {
      Py_ssize_t size = 0;
      const char* text = PyUnicode_AsUTF8AndSize(name.ptr(), &size);
      if (text == nullptr) throw nb::python_error();
      if (size > 0) {
        full.append(text, static_cast<size_t>(size));
        return false;
      }
    } else {
      int truth = PyObject_IsTrue(name.ptr());
      if (truth < 0) throw nb::python_error();
      if (truth != 0) {
        throw nb::type_error(("can only concatenate str (not \"" +
                              std::string(Py_TYPE(name.ptr())->tp_name) + "\") to str")
                                 .c_str());
      }
    }
  }
  full.append(unnamed).append(std::to_string(handle));
  return true;
}

// Handles are Python ints; anything else names no operation.
bool toKey(nb::handle h, int64_t& key) {
  if (!PyLong_Check(h.ptr())) return false;
  int overflow = 0;
  long long v = PyLong_AsLongLongAndOverflow(h.ptr(), &overflow);
  if (overflow != 0 || (v == -1 && PyErr_Occurred())) {
    PyErr_Clear();
    return false;
  }
  key = static_cast<int64_t>(v);
  return true;
}

}  // namespace

class HandleSpace {
 public:
  // `finisher(work, kind, payload)`: synchronize()'s result for operations tracked with a kind
  // other than 0. `allreducePrefix`, `unnamed`: the adapter's naming rule for the fast path.
  // `deviceStream(device_ordinal) -> int`: the producer stream of the fast path's device tensors
  // (the framework's current stream); None: the default stream. Called only for device tensors.
  HandleSpace(nb::object finisher, std::string allreducePrefix, std::string unnamed,
              nb::object deviceStream)
      : finisher_(std::move(finisher)),
        deviceStream_(std::move(deviceStream)),
        allreducePrefix_(std::move(allreducePrefix)),
        unnamed_(std::move(unnamed)) {}
  HandleSpace(const HandleSpace&) = delete;
  HandleSpace& operator=(const HandleSpace&) = delete;

  int64_t next() { return ++last_; }

  void track(int64_t handle, nb::object work, nb::object payload, int kind) {
    if (!nb::isinstance<PyWork>(work)) {
      throw nb::type_error(
          ("track(): expected a Work, got " + std::string(Py_TYPE(work.ptr())->tp_name)).c_str());
    }
    Slot& slot = table_[handle];
    slot.pyWork = std::move(work);
    slot.kind = kind;
    slot.payload = std::move(payload);
  }

  // The fast path of allreduce_async(_): validates, names, enqueues and registers in one call.
  // `in`/`out`: DLPack capsules (or other array objects); out=None reduces in place.
  int64_t allreduce(nb::handle in, nb::handle out, nb::object payload, nb::handle name, int op,
                    double prescale, double postscale, int processSet) {
    reapOrphans();
    const int64_t handle = ++last_;
    std::optional<Scratch> own;
    Scratch& scratch = scratch_.busy ? own.emplace() : scratch_;
    scratch.busy = true;
    struct Release {
      Scratch& s;
      ~Release() { s.busy = false; }
    } release{scratch};
    Options& options = scratch.options;
    options.oneOffName = fullName(options.name, allreducePrefix_, unnamed_, name, handle);
    options.op = static_cast<ReduceOp>(op);
    options.prescale = prescale;
    options.postscale = postscale;
    options.processSet = processSet;
    Slot slot;
    slot.in.take(in, scratch.in, "allreduce", deviceStream_);
    if (!out.is_none()) slot.out.take(out, scratch.out, "allreduce", deviceStream_);
    slot.work = hvd::allreduceAsync(scratch.in, out.is_none() ? scratch.in : scratch.out, options);
    slot.payload = std::move(payload);
    table_.emplace(handle, std::move(slot));
    return handle;
  }

  nb::object synchronize(nb::handle h) {
    int64_t key = 0;
    if (!toKey(h, key)) return nb::none();
    auto it = table_.find(key);
    if (it == table_.end()) return nb::none();
    Slot slot = std::move(it->second);
    table_.erase(it);
    if (slot.work) {
      waitWork(*slot.work);
    } else {
      nb::cast<PyWork&>(slot.pyWork).wait();
    }
    if (slot.kind == 0) return std::move(slot.payload);
    return finisher_(slot.pyWork, slot.kind, slot.payload);
  }

  bool poll(nb::handle h) const {
    int64_t key = 0;
    auto it = toKey(h, key) ? table_.find(key) : table_.end();
    if (it == table_.end()) {
      throw nb::value_error(
          ("Handle " + std::string(nb::str(h).c_str()) + " was not created or has been cleared.")
              .c_str());
    }
    const Slot& slot = it->second;
    return slot.work ? slot.work->isCompleted() : nb::cast<PyWork&>(slot.pyWork).poll();
  }

  void reset() {
    std::unordered_map<int64_t, Slot> dropped;
    dropped.swap(table_);
    last_ = 0;
    dropped.clear();  // may run arbitrary deallocators: the space is already consistent
  }

  size_t pending() const { return table_.size(); }

  // Garbage-collector support: the finisher usually refers back (through its module's globals)
  // to the module that holds this space, and payloads may refer to anything.
  static int traverse(PyObject* self, visitproc visit, void* arg) {
    Py_VISIT(Py_TYPE(self));
    if (!nb::inst_ready(self)) return 0;
    HandleSpace* space = nb::inst_ptr<HandleSpace>(self);
    Py_VISIT(space->finisher_.ptr());
    Py_VISIT(space->deviceStream_.ptr());
    for (const auto& [handle, slot] : space->table_) {
      Py_VISIT(slot.payload.ptr());
      Py_VISIT(slot.pyWork.ptr());
    }
    return 0;
  }
  static int clear(PyObject* self) {
    HandleSpace* space = nb::inst_ptr<HandleSpace>(self);
    space->reset();
    space->finisher_ = nb::object();
    space->deviceStream_ = nb::object();
    return 0;
  }

 private:
  std::unordered_map<int64_t, Slot> table_;
  int64_t last_ = 0;
  nb::object finisher_;
  nb::object deviceStream_;
  const std::string allreducePrefix_;
  const std::string unnamed_;
  Scratch scratch_;
};

namespace {

PyType_Slot handleSpaceSlots[] = {{Py_tp_traverse, reinterpret_cast<void*>(&HandleSpace::traverse)},
                                  {Py_tp_clear, reinterpret_cast<void*>(&HandleSpace::clear)},
                                  {0, nullptr}};

}  // namespace

void bindHandles(nb::module_& m) {
  using namespace nb::literals;
  nb::class_<HandleSpace>(m, "HandleSpace", nb::type_slots(handleSpaceSlots),
                          "One adapter's handles: counter, pending operations, completion.")
      .def(nb::init<nb::object, std::string, std::string, nb::object>(), "finisher"_a,
           "allreduce_prefix"_a, "unnamed"_a, "device_stream"_a.none() = nb::none(),
           "finisher(work, kind, payload) gives synchronize()'s result for kinds other than 0; "
           "allreduce() names operations prefix + name, or prefix + unnamed + str(handle). "
           "device_stream(device_ordinal) -> int: the producer stream of allreduce()'s device "
           "tensors (None: the default stream).")
      .def("next_handle", &HandleSpace::next,
           "A fresh handle (counts every asynchronous call since the last reset()).")
      .def("track", &HandleSpace::track, "handle"_a, "work"_a, "payload"_a.none(), "kind"_a = 0,
           "Registers a Work under `handle`: synchronize(handle) waits for it and returns "
           "`payload` (kind 0) or finisher(work, kind, payload).")
      .def("allreduce", &HandleSpace::allreduce, "tensor"_a, "output"_a.none(), "payload"_a.none(),
           "name"_a.none(), "op"_a, "prescale"_a, "postscale"_a, "process_set"_a,
           "allreduce_async + track in one call (see the constructor for the name); "
           "synchronize(handle) returns `payload`.")
      .def("synchronize", &HandleSpace::synchronize, "handle"_a.none(),
           "Waits for the operation behind `handle` (releasing the GIL only while it runs) and "
           "returns its result; None for an unknown handle. Failures raise HorovodInternalError.")
      .def("poll", &HandleSpace::poll, "handle"_a.none(),
           "True once the operation behind `handle` has completed (synchronize() will not block).")
      .def("reset", &HandleSpace::reset, "Forgets every handle and restarts the counter.")
      .def_prop_ro("pending", &HandleSpace::pending,
                   "Handles registered and not yet synchronized.");
}

}  // namespace hvd::py
