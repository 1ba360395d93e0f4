#include "mpi/mpi_library.h"

#include <dlfcn.h>

#include <mutex>
#include <sstream>

#include "common/logging.h"
#include "common/params.h"
#include "horovod/errors.h"

#ifndef HVD_MPI_FLAVORS
#define HVD_MPI_FLAVORS ""
#endif

namespace hvd::mpi {
namespace {

// The libmpi soname each flavor's plugin links (Debian/Ubuntu, Fedora and upstream builds).
struct Flavor {
  const char* name;
  const char* libmpi;
};
constexpr Flavor kFlavors[] = {{"openmpi", "libmpi.so.40"}, {"mpich", "libmpich.so.12"}};

std::mutex& stateMutex() {
  static std::mutex mu;
  return mu;
}
MpiState& state() {
  static MpiState s;
  return s;
}
const HvdMpiPlugin* loaded = nullptr;

// The folder of the binary this code is linked into (horovod/_core*.so or libhorovod.so): plugins
// are installed next to it.
std::string ownDirectory() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&builtFlavors), &info) == 0 || info.dli_fname == nullptr) return "";
  std::string path = info.dli_fname;
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? std::string(".") : path.substr(0, slash);
}

bool isSet(const char* name) {
  auto value = processEnvironment()(name);
  return value.has_value() && !value->empty();
}

// dlopen()s the plugin of `flavor`; "" and the reason when it cannot be loaded.
const HvdMpiPlugin* openPlugin(const std::string& flavor, std::string* path, std::string* why) {
  const std::string file = "libhorovod_mpi_" + flavor + ".so";
  std::vector<std::string> candidates;
  std::string dir = ownDirectory();
  if (!dir.empty()) candidates.push_back(dir + "/" + file);
  candidates.push_back(file);  // LD_LIBRARY_PATH and the system's search path
  for (const auto& candidate : candidates) {
    // RTLD_GLOBAL: libmpi's own components (Open MPI's MCA plugins) resolve libmpi's symbols
    // through the global scope.
    void* handle = dlopen(candidate.c_str(), RTLD_NOW | RTLD_GLOBAL);
    if (handle == nullptr) {
      const char* e = dlerror();
      if (!why->empty()) *why += "; ";
      *why += candidate + ": " + (e ? e : "dlopen failed");
      continue;
    }
    auto entry = reinterpret_cast<const HvdMpiPlugin* (*)()>(dlsym(handle, "hvd_mpi_plugin"));
    if (entry == nullptr) {
      if (!why->empty()) *why += "; ";
      *why += candidate + ": not a Horovod MPI plugin (no hvd_mpi_plugin symbol)";
      continue;
    }
    if (entry()->abi != HVD_MPI_PLUGIN_ABI) {
      if (!why->empty()) *why += "; ";
      *why += candidate + ": a stale Horovod MPI plugin (plugin ABI " + std::to_string(entry()->abi) +
              ", this core needs " + std::to_string(HVD_MPI_PLUGIN_ABI) +
              "): it was built by another Horovod version; rebuild and reinstall Horovod";
      continue;
    }
    *path = candidate;
    return entry();
  }
  return nullptr;
}

}  // namespace

std::vector<std::string> builtFlavors() {
  std::vector<std::string> out;
  std::stringstream list(HVD_MPI_FLAVORS);
  std::string item;
  while (std::getline(list, item, ',')) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

std::string chooseFlavor() {
  for (const auto& f : kFlavors) {
    void* already = dlopen(f.libmpi, RTLD_NOW | RTLD_NOLOAD);
    if (already != nullptr) {
      dlclose(already);
      return f.name;
    }
  }
  if (isSet("OMPI_COMM_WORLD_SIZE") || isSet("OMPI_COMM_WORLD_RANK")) return "openmpi";
  if (isSet("MPI_LOCALRANKID") || isSet("PMI_RANK")) return "mpich";
  return "";
}

MpiState mpiState() {
  std::lock_guard<std::mutex> lock(stateMutex());
  return state();
}

const HvdMpiPlugin* loadedPlugin() {
  std::lock_guard<std::mutex> lock(stateMutex());
  return loaded;
}

const char* threadLevelName(int level) {
  static const char* kNames[] = {"MPI_THREAD_SINGLE", "MPI_THREAD_FUNNELED", "MPI_THREAD_SERIALIZED",
                                 "MPI_THREAD_MULTIPLE"};
  return level >= 0 && level <= 3 ? kNames[level] : "unknown";
}

const HvdMpiPlugin& initMpi(bool threadsDisable, bool dataPlane) {
  std::lock_guard<std::mutex> lock(stateMutex());
  if (loaded != nullptr) return *loaded;
  const std::vector<std::string> built = builtFlavors();
  if (built.empty()) {
    throw Error(
        "MPI was asked for (launched by mpirun/mpiexec, an mpi4py communicator, or HOROVOD_CONTROLLER=mpi) but "
        "this Horovod was built without MPI: install Open MPI or MPICH with its development package "
        "(libopenmpi-dev / libmpich-dev) and rebuild, or launch with horovodrun (docs/mpi.md)");
  }
  std::string wanted = chooseFlavor();
  std::vector<std::string> order;
  if (!wanted.empty()) {
    bool have = false;
    for (const auto& f : built) have = have || f == wanted;
    if (!have) {
      throw Error("this process runs under " + wanted + " but Horovod's MPI plugins were built for " + HVD_MPI_FLAVORS +
                  " only: rebuild Horovod with " + wanted +
                  "'s development package installed, or launch with that MPI's mpirun (docs/mpi.md)");
    }
    order.push_back(wanted);
  } else {
    order = built;
  }
  std::string why;
  std::string path;
  const HvdMpiPlugin* plugin = nullptr;
  for (const auto& flavor : order) {
    plugin = openPlugin(flavor, &path, &why);
    if (plugin != nullptr) break;
  }
  if (plugin == nullptr) {
    throw Error("could not load Horovod's MPI plugin (" + why +
                "): the MPI library it was built against is missing or of another ABI; install it, or rebuild "
                "Horovod against the MPI on this machine (docs/mpi.md)");
  }
  char err[1024] = {0};
  int provided = 0, initializedHere = 0;
  // 3 = MPI_THREAD_MULTIPLE; with threads disabled, SERIALIZED when the data plane is MPI (the
  // engine's collectives may run on the background thread or a waiting caller, one at a time),
  // else SINGLE (only the initializing thread calls MPI).
  const int level = threadsDisable ? (dataPlane ? 2 : 0) : 3;
  if (plugin->init(level, &provided, &initializedHere, err, sizeof(err)) != 0) {
    throw Error(std::string("MPI initialization through ") + path + " failed: " + err);
  }
  char version[512] = {0};
  plugin->libraryVersion(version, sizeof(version));
  MpiState& s = state();
  s.enabled = true;
  s.flavor = plugin->flavor;
  s.plugin = path;
  s.libraryVersion = version;
  s.threadsMultiple = provided == 3;
  s.threadLevel = provided;
  s.initializedHere = initializedHere != 0;
  if (!s.initializedHere && !s.threadsMultiple && !threadsDisable) {
    HVD_LOG(Warning) << "MPI was initialized before Horovod without MPI_THREAD_MULTIPLE; mixing MPI calls on "
                        "several threads (mpi4py and Horovod's) is then not safe";
  }
  HVD_LOG(Debug) << "MPI plugin " << path << " (" << s.flavor << "): " << s.libraryVersion
                 << (s.initializedHere ? ", initialized by Horovod" : ", initialized before Horovod")
                 << ", thread level " << provided;
  loaded = plugin;
  return *loaded;
}

}  // namespace hvd::mpi
