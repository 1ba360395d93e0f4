#include "handles.h"

#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "api/default_runtime.h"
#include "arrays.h"
#include "errors.h"
#include "work.h"

namespace hvd::py {
namespace {

// Kinds whose synchronize() result is the registered payload itself (horovod.torch's _SINGLE,
// _GROUP); any other kind goes through the adapter's finisher.
constexpr int kLastPayloadKind = 1;

// An array argument of the fast path: a DLPack capsule read in place (the usual case) or, for
// any other array object, nanobind's import of it. Either keeps the memory alive.
struct Held {
  nb::object capsule;
  nb::ndarray<> array;

  // Fills `view` from `obj`; throws InvalidArgument (ValueError) if it is no usable array.
  void take(nb::handle obj, TensorView& view, const char* what) {
    if (viewOfCapsule(obj, view, what)) {
      capsule = nb::borrow(obj);
      return;
    }
    if (!nb::try_cast<nb::ndarray<>>(obj, array)) {
      throw InvalidArgument(std::string(what) + ": expected a DLPack capsule or an array, got " +
                            Py_TYPE(obj.ptr())->tp_name);
    }
    view = toView(array, what);
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

// GIL-protected. Leaked on purpose, like the orphans: they hold Python objects, which must not
// be released after the interpreter has finalized.
auto* table = new std::unordered_map<int64_t, Slot>();
int64_t lastHandle = 0;
nb::object* finisher = new nb::object();
auto* cachedRuntime = new std::shared_ptr<engine::Runtime>();
// Scratch of the fast path (GIL-protected), reused so that a call allocates no shape vector and
// no name string of its own. A call re-entered from Python code that the outer call ran (a
// name's __bool__, an array's __dlpack__) uses a scratch of its own.
struct Scratch {
  TensorView in, out;
  Options options;
  bool busy = false;
};
auto* sharedScratch = new Scratch();

engine::Runtime& runningRuntime() {
  engine::Runtime* runtime = cachedRuntime->get();
  if (runtime == nullptr || !runtime->initialized()) {
    requireRunning();  // throws unless a runtime is up (one not started through init() below)
    *cachedRuntime = api::defaultRuntime();
    runtime = cachedRuntime->get();
    if (runtime == nullptr) throwNotInitialized();
    return *runtime;
  }
  reapOrphans();
  return *runtime;
}

// Python's `prefix + name if name else prefix + 'noname.%d' % handle`, into `full`. Returns
// whether the name was generated (a one-off name: Options::oneOffName).
bool fullName(std::string& full, const char* prefix, nb::handle name, int64_t handle) {
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
  full.append("noname.").append(std::to_string(handle));
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

// The fast path of allreduce_async(_): validates, names, enqueues and registers in one call.
// `in`/`out`: DLPack capsules (or other array objects); out=None reduces in place.
int64_t allreduceTracked(nb::handle in, nb::handle out, nb::object payload, nb::handle name,
                         int op, double prescale, double postscale, int processSet) {
  engine::Runtime& runtime = runningRuntime();
  const int64_t handle = ++lastHandle;
  std::optional<Scratch> own;
  Scratch& scratch = sharedScratch->busy ? own.emplace() : *sharedScratch;
  scratch.busy = true;
  struct Release {
    Scratch& s;
    ~Release() { s.busy = false; }
  } release{scratch};
  Options& options = scratch.options;
  options.oneOffName = fullName(options.name, "allreduce.", name, handle);
  options.op = static_cast<ReduceOp>(op);
  options.prescale = prescale;
  options.postscale = postscale;
  options.processSet = processSet;
  Slot slot;
  slot.in.take(in, scratch.in, "allreduce");
  if (!out.is_none()) slot.out.take(out, scratch.out, "allreduce");
  slot.work = runtime.allreduce(scratch.in, out.is_none() ? scratch.in : scratch.out, options);
  slot.payload = std::move(payload);
  table->emplace(handle, std::move(slot));
  return handle;
}

void track(int64_t handle, nb::object work, int kind, nb::object payload) {
  nb::cast<PyWork&>(work);  // type check: raises TypeError for anything but a Work
  Slot& slot = (*table)[handle];
  slot.pyWork = std::move(work);
  slot.kind = kind;
  slot.payload = std::move(payload);
}

nb::object synchronize(nb::handle h) {
  int64_t key = 0;
  if (!toKey(h, key)) return nb::none();
  auto it = table->find(key);
  if (it == table->end()) return nb::none();
  Slot slot = std::move(it->second);
  table->erase(it);
  if (slot.work) {
    waitWork(*slot.work);
  } else {
    nb::cast<PyWork&>(slot.pyWork).wait();
  }
  if (slot.kind <= kLastPayloadKind) return std::move(slot.payload);
  return (*finisher)(slot.pyWork, slot.kind, slot.payload);
}

bool poll(nb::handle h) {
  int64_t key = 0;
  auto it = toKey(h, key) ? table->find(key) : table->end();
  if (it == table->end()) {
    throw nb::value_error(
        ("Handle " + std::string(nb::str(h).c_str()) + " was not created or has been cleared.")
            .c_str());
  }
  const Slot& slot = it->second;
  return slot.work ? slot.work->isCompleted() : nb::cast<PyWork&>(slot.pyWork).poll();
}

void resetHandles() {
  std::unordered_map<int64_t, Slot> dropped;
  dropped.swap(*table);
  lastHandle = 0;
  dropped.clear();  // may run arbitrary deallocators: the table is already consistent
}

}  // namespace

void setCachedRuntime(std::shared_ptr<engine::Runtime> runtime) { *cachedRuntime = std::move(runtime); }

void bindHandles(nb::module_& m) {
  using namespace nb::literals;
  m.def("next_handle", [] { return ++lastHandle; },
        "A fresh handle (counts every asynchronous call since the last reset_handles()).");
  m.def("track_handle", &track, "handle"_a, "work"_a, "kind"_a, "payload"_a.none(),
        "Registers a Work under `handle`: synchronize(handle) waits for it and returns `payload` "
        "(kind 0 or 1) or finisher(work, kind, payload).");
  m.def("allreduce_h", &allreduceTracked, "tensor"_a, "output"_a.none(), "payload"_a.none(),
        "name"_a.none(), "op"_a, "prescale"_a, "postscale"_a, "process_set"_a,
        "allreduce_async + track_handle in one call: the operation is named 'allreduce.<name>' "
        "or 'allreduce.noname.<handle>'; synchronize(handle) returns `payload`.");
  m.def("synchronize", &synchronize, "handle"_a.none(),
        "Waits for the operation behind `handle` (releasing the GIL only while it runs) and "
        "returns its result; None for an unknown handle. Failures raise HorovodInternalError.");
  m.def("poll", &poll, "handle"_a.none(),
        "True once the operation behind `handle` has completed (synchronize() will not block).");
  m.def("reset_handles", &resetHandles, "Forgets every handle and restarts the counter.");
  m.def(
      "set_finisher", [](nb::object fn) { *finisher = std::move(fn); }, "fn"_a,
      "fn(work, kind, payload) -> the synchronize() result for kinds other than 0 and 1.");
  // Python's atexit runs before the C++ exit handlers that shut the default runtime down: drop
  // the cached reference first, so the runtime is destroyed where it would be without us.
  nb::module_::import_("atexit").attr("register")(
      nb::cpp_function([] { setCachedRuntime(nullptr); }));
}

}  // namespace hvd::py
