// horovod._core: the one binding module every framework adapter uses.
//
// Entry points are thin: arrays cross as DLPack views (see arrays.h), options are positional
// scalars, and every collective returns a Work (see work.h). Names, defaults and framework
// conventions (name prefixes, handle counters) are the adapters' business, not this module's.
// Everything here runs with the GIL held except where it is released explicitly (init,
// shutdown, process-set changes, barrier/join waits, Work.wait).
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "arrays.h"
#include "common/package_dirs.h"
#include "elastic_rounds.h"
#include "errors.h"
#include "handles.h"
#include "horovod/api_table.h"
#include "horovod/horovod.h"
#include "rendezvous.h"
#include "work.h"

namespace hvd::py {
namespace {

using WorkHandle = std::unique_ptr<PyWork>;
using Arrays = std::vector<nb::ndarray<>>;

// `oneOff`: the caller generated `name` for an unnamed call (Options::oneOffName).
Options makeOptions(std::string&& name, bool oneOff, int op, double prescale, double postscale,
                    int processSet) {
  Options o;
  o.name = std::move(name);
  o.oneOffName = oneOff;
  o.op = static_cast<ReduceOp>(op);
  o.prescale = prescale;
  o.postscale = postscale;
  o.processSet = processSet;
  return o;
}

template <typename Array>
void viewsOf(const std::vector<Array>& arrays, const char* what, std::vector<TensorView>& views,
             Arrays& keep, nb::handle stream) {
  views.reserve(arrays.size());
  for (const auto& a : arrays) {
    views.push_back(toView(a, what, stream));
    keep.emplace_back(a);
  }
}

WorkHandle wrap(WorkPtr work, Arrays&& keep) {
  return std::make_unique<PyWork>(std::move(work), std::move(keep));
}

// ---- collectives -------------------------------------------------------------------------------

// `in` is an OutArray: with out=None the reduction writes into it (read-only arrays are refused).
WorkHandle allreduceAsync(const OutArray& in, const std::optional<OutArray>& out, std::string name,
                          int op, double prescale, double postscale, int processSet, bool oneOff,
                          nb::handle stream) {
  reapOrphans();  // the arrays of dropped operations that have completed
  TensorView inView = toView(in, "allreduce", stream);
  Arrays keep;
  keep.emplace_back(in);
  TensorView outView = inView;
  if (out) {
    outView = toView(*out, "allreduce", stream);
    keep.emplace_back(*out);
  }
  auto work = hvd::allreduceAsync(
      inView, outView, makeOptions(std::move(name), oneOff, op, prescale, postscale, processSet));
  return wrap(std::move(work), std::move(keep));
}

WorkHandle groupedAllreduceAsync(const std::vector<OutArray>& in,
                                 const std::optional<std::vector<OutArray>>& out, std::string name,
                                 int op, double prescale, double postscale, int processSet,
                                 bool oneOff, nb::handle stream) {
  reapOrphans();
  std::vector<TensorView> inViews, outViews;
  Arrays keep;
  viewsOf(in, "grouped_allreduce", inViews, keep, stream);
  if (out) {
    if (out->size() != in.size()) {
      throw InvalidArgument("grouped_allreduce: got " + std::to_string(in.size()) + " inputs but " +
                            std::to_string(out->size()) + " outputs");
    }
    viewsOf(*out, "grouped_allreduce", outViews, keep, stream);
  } else {
    outViews = inViews;
  }
  auto work = hvd::groupedAllreduceAsync(
      inViews, outViews, makeOptions(std::move(name), oneOff, op, prescale, postscale, processSet));
  return wrap(std::move(work), std::move(keep));
}

WorkHandle allgatherAsync(const InArray& in, std::string name, int processSet, bool oneOff,
                          nb::handle stream) {
  reapOrphans();
  TensorView view = toView(in, "allgather", stream);
  Arrays keep;
  keep.emplace_back(in);
  auto work =
      hvd::allgatherAsync(view, makeOptions(std::move(name), oneOff, 1, 1.0, 1.0, processSet));
  return wrap(std::move(work), std::move(keep));
}

WorkHandle groupedAllgatherAsync(const std::vector<InArray>& in, std::string name, int processSet,
                                 bool oneOff, nb::handle stream) {
  reapOrphans();
  std::vector<TensorView> views;
  Arrays keep;
  viewsOf(in, "grouped_allgather", views, keep, stream);
  auto work = hvd::groupedAllgatherAsync(
      views, makeOptions(std::move(name), oneOff, 1, 1.0, 1.0, processSet));
  return wrap(std::move(work), std::move(keep));
}

WorkHandle broadcastAsync(const OutArray& tensor, int root, std::string name, int processSet,
                          bool oneOff, nb::handle stream) {
  reapOrphans();
  TensorView view = toView(tensor, "broadcast", stream);
  Arrays keep;
  keep.emplace_back(tensor);
  Options options = makeOptions(std::move(name), oneOff, 1, 1.0, 1.0, processSet);
  options.root = root;
  auto work = hvd::broadcastAsync(view, options);
  return wrap(std::move(work), std::move(keep));
}

WorkHandle alltoallAsync(const InArray& in, const std::optional<std::vector<int32_t>>& splits,
                         std::string name, int processSet, bool oneOff, nb::handle stream) {
  reapOrphans();
  TensorView view = toView(in, "alltoall", stream);
  Arrays keep;
  keep.emplace_back(in);
  Options options = makeOptions(std::move(name), oneOff, 1, 1.0, 1.0, processSet);
  if (splits) options.splits = *splits;
  auto work = hvd::alltoallAsync(view, options);
  return wrap(std::move(work), std::move(keep));
}

WorkHandle reducescatterAsync(const InArray& in, const OutArray& out, std::string name, int op,
                              double prescale, double postscale, int processSet, bool oneOff,
                              nb::handle stream) {
  reapOrphans();
  TensorView inView = toView(in, "reducescatter", stream);
  TensorView outView = toView(out, "reducescatter", stream);
  Arrays keep;
  keep.emplace_back(in);
  keep.emplace_back(out);
  auto work = hvd::reducescatterAsync(
      inView, outView, makeOptions(std::move(name), oneOff, op, prescale, postscale, processSet));
  return wrap(std::move(work), std::move(keep));
}

WorkHandle groupedReducescatterAsync(const std::vector<InArray>& in,
                                     const std::vector<OutArray>& out, std::string name, int op,
                                     double prescale, double postscale, int processSet, bool oneOff,
                                     nb::handle stream) {
  reapOrphans();
  if (out.size() != in.size()) {
    throw InvalidArgument("grouped_reducescatter: got " + std::to_string(in.size()) +
                          " inputs but " + std::to_string(out.size()) + " outputs");
  }
  std::vector<TensorView> inViews, outViews;
  Arrays keep;
  viewsOf(in, "grouped_reducescatter", inViews, keep, stream);
  viewsOf(out, "grouped_reducescatter", outViews, keep, stream);
  auto work = hvd::groupedReducescatterAsync(
      inViews, outViews, makeOptions(std::move(name), oneOff, op, prescale, postscale, processSet));
  return wrap(std::move(work), std::move(keep));
}

WorkHandle barrierAsync(int processSet) {
  reapOrphans();
  return wrap(hvd::barrierAsync(processSet), {});
}

WorkHandle joinAsync() {
  reapOrphans();
  return wrap(hvd::joinAsync(), {});
}

// ---- lifecycle ---------------------------------------------------------------------------------

void initCore(const std::optional<std::vector<std::vector<int>>>& processSets, bool dynamic,
              int64_t mpiComm) {
  InitOptions options;
  if (processSets) options.processSets = *processSets;
  options.dynamicProcessSets = dynamic;
  options.mpiComm = mpiComm;
  {
    nb::gil_scoped_release release;
    hvd::init(options);
  }
}

void shutdownCore() {
  {
    nb::gil_scoped_release release;
    hvd::shutdown();
  }
  dropOrphans();
}

}  // namespace

}  // namespace hvd::py

NB_MODULE(_core, m) {
  namespace nb = nanobind;
  using namespace nb::literals;
  using namespace hvd::py;

  m.doc() =
      "Horovod core binding: lifecycle, topology, process sets and collectives on DLPack arrays.";

  // Where Python wheels install libraries the core loads at run time (the nvidia-* wheels of
  // CUDA and NCCL): this interpreter's site-packages folders, in sys.path order.
  {
    std::vector<std::string> dirs;
    for (nb::handle entry : nb::module_::import_("sys").attr("path")) {
      if (!nb::isinstance<nb::str>(entry)) continue;
      std::string dir = nb::cast<std::string>(entry);
      if (dir.ends_with("site-packages") || dir.ends_with("dist-packages")) dirs.push_back(dir);
    }
    hvd::setPythonPackageDirs(std::move(dirs));
  }
  registerErrorTranslator();
  registerRendezvous(m);
  registerElasticRounds(m);
  // Adapters' handle spaces (and their bound methods) are reachable from framework objects that
  // Python's garbage collector cannot see into (e.g. hooks on torch's autograd graph), which
  // live until the process exits: nanobind would report them as leaks at interpreter exit.
  nb::set_leak_warnings(false);
  bindWork(m);
  bindHandles(m);

  m.def("init", &initCore, "process_sets"_a.none() = nb::none(), "dynamic"_a = false,
        "mpi_comm"_a = -1,
        "Joins the job described by the environment; blocks until every rank has joined. mpi_comm: "
        "the "
        "Fortran handle (mpi4py Comm.py2f()) of the communicator forming the job, -1 for "
        "MPI_COMM_WORLD.");
  m.def("shutdown", &shutdownCore, "Stops the engine; pending operations fail.");
  m.def("is_initialized", [] { return hvd::isInitialized(); });
  m.def("start_timeline", &hvd::startTimeline, "file_path"_a, "mark_cycles"_a = false,
        nb::call_guard<nb::gil_scoped_release>(),
        "Starts writing the timeline to file_path on rank 0 (closing the current one); returns "
        "once it is open.");
  m.def("stop_timeline", &hvd::stopTimeline, nb::call_guard<nb::gil_scoped_release>(),
        "Stops the timeline and completes its file.");
  m.def("rank", [] { return hvd::rank(); });
  m.def("size", [] { return hvd::size(); });
  m.def("local_rank", [] { return hvd::localRank(); });
  m.def("local_size", [] { return hvd::localSize(); });
  m.def("cross_rank", [] { return hvd::crossRank(); });
  m.def("cross_size", [] { return hvd::crossSize(); });
  m.def("is_homogeneous", [] { return hvd::isHomogeneous(); });
  m.def(
      "elastic_host_updates",
      [] {
        hvd::ElasticHostUpdates u;
        {
          nb::gil_scoped_release release;
          u = hvd::elasticHostUpdates();
        }
        return nb::make_tuple(u.round, u.latest, u.flags);
      },
      "(round, latest, flags): the elastic round joined at init (-1: static job) and the host-set "
      "changes "
      "announced since it formed.");

  m.def(
      "add_process_set",
      [](std::vector<int> ranks) {
        nb::gil_scoped_release release;
        return hvd::addProcessSet(std::move(ranks));
      },
      "ranks"_a, "Collective: registers a process set, returns its id.");
  m.def(
      "remove_process_set",
      [](int id) {
        nb::gil_scoped_release release;
        return hvd::removeProcessSet(id);
      },
      "process_set_id"_a, "Collective: removes a process set; False for id 0 or unknown ids.");
  m.def("process_set_ranks", [](int id) { return hvd::processSetRanks(id); }, "process_set_id"_a);
  m.def("process_set_ids", [] { return hvd::processSetIds(); });

  // Built features. The native controller and CPU collectives answer to the Gloo name; MPI is
  // what the job rendezvoused through (plugins loaded at run time, docs/mpi.md).
  m.def("mpi_built", [] { return hvd::mpiBuilt(); });
  m.def("mpi_threads_supported", [] { return hvd::mpiThreadsSupported(); });
  m.def("mpi_description", [] { return hvd::mpiDescription(); });
  m.def("gloo_built", [] { return true; });
  // CUDA and NCCL: compiled in when nvcc was found at build time, loaded at run time
  // (docs/gpu.md). nccl_built is the NCCL_VERSION_CODE of the headers compiled against.
  m.def("nccl_built", [] { return hvd::ncclBuilt(); });
  m.def("ddl_built", [] { return false; });
  m.def("ccl_built", [] { return false; });
  m.def("cuda_built", [] { return hvd::cudaBuilt(); });
  m.def(
      "cuda_libraries",
      [] {
        nb::dict out;
        for (const auto& [key, value] : hvd::cudaLibraries()) out[key.c_str()] = value;
        return out;
      },
      "What loading the CUDA runtime, NCCL and the kernel library found (paths, versions, errors); "
      "{} when CUDA was not built. Loads them on the first call.");
  m.def("rocm_built", [] { return false; });
  m.def("mpi_enabled", [] { return hvd::mpiEnabled(); });
  m.def("gloo_enabled", [] { return hvd::isInitialized(); });

  // Collectives. Positional arguments in this order; `name` is the full matching key; `stream`
  // (keyword): the producer stream of device tensors, an int, a callable(device_ordinal) -> int
  // or None (arrays.h).
  m.def(
      "shared_buffer",
      [](size_t nbytes) {
        return toResult(hvd::allocateShared(hvd::DataType::kUInt8, {static_cast<int64_t>(nbytes)}));
      },
      "nbytes"_a,
      "A zero-filled 1-D uint8 array of nbytes in memory the ranks of this host share (64-byte "
      "aligned; "
      "hvd::allocateShared). In-place allreduces inside it run zero-copy when every rank uses one. "
      "The "
      "array (and torch.from_dlpack views of it) keeps the memory alive.");
  m.def(
      "engine_counters",
      [] {
        std::vector<std::tuple<std::string, std::string, uint64_t>> out;
        for (auto& c : hvd::engineCounters())
          out.emplace_back(std::move(c.backend), std::move(c.algorithm), c.count);
        return out;
      },
      "[(backend, algorithm, count)]: the collectives the engine ran since init, by the backend "
      "and algorithm "
      "that ran them (hvd::engineCounters; horovod.common.basics.engine_counters makes the dict).");
  m.def("allreduce_async", &allreduceAsync, "tensor"_a, "output"_a.none(), "name"_a, "op"_a,
        "prescale"_a, "postscale"_a, "process_set"_a, "one_off"_a = false,
        "stream"_a.none() = nb::none(),
        "out = postscale * OP(prescale * tensor); output=None reduces in place.");
  m.def("grouped_allreduce_async", &groupedAllreduceAsync, "tensors"_a, "outputs"_a.none(),
        "name"_a, "op"_a, "prescale"_a, "postscale"_a, "process_set"_a, "one_off"_a = false,
        "stream"_a.none() = nb::none(), "Members are named <name>_<i>of<n> by the core.");
  m.def("allgather_async", &allgatherAsync, "tensor"_a, "name"_a, "process_set"_a,
        "one_off"_a = false, "stream"_a.none() = nb::none());
  m.def("grouped_allgather_async", &groupedAllgatherAsync, "tensors"_a, "name"_a, "process_set"_a,
        "one_off"_a = false, "stream"_a.none() = nb::none());
  m.def("broadcast_async", &broadcastAsync, "tensor"_a, "root_rank"_a, "name"_a, "process_set"_a,
        "one_off"_a = false, "stream"_a.none() = nb::none(),
        "In place: overwrites tensor with root's contents (root is a global rank).");
  m.def("alltoall_async", &alltoallAsync, "tensor"_a, "splits"_a.none(), "name"_a, "process_set"_a,
        "one_off"_a = false, "stream"_a.none() = nb::none());
  m.def("reducescatter_async", &reducescatterAsync, "tensor"_a, "output"_a, "name"_a, "op"_a,
        "prescale"_a, "postscale"_a, "process_set"_a, "one_off"_a = false,
        "stream"_a.none() = nb::none());
  m.def("grouped_reducescatter_async", &groupedReducescatterAsync, "tensors"_a, "outputs"_a,
        "name"_a, "op"_a, "prescale"_a, "postscale"_a, "process_set"_a, "one_off"_a = false,
        "stream"_a.none() = nb::none());
  m.def("barrier_async", &barrierAsync, "process_set"_a = 0);
  m.def(
      "api_table_address", [] { return reinterpret_cast<uintptr_t>(&hvd::apiTable()); },
      "The address of this module's hvd::ApiTable, for kernel libraries loaded by a framework "
      "(horovod/api_table.h) that must drive this module's engine.");
  m.def("join_async", &joinAsync);
}
