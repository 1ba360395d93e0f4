// The worker environment: the launcher's own environment minus the excluded
// names, plus the flag-derived HOROVOD_* knobs, plus the job's rendezvous and controller
// variables, plus each slot's topology. Later layers override earlier ones.
//
// The secret (HOROVOD_SECRET_KEY) is added by the spawners, never put on a command line: local
// workers get it through execve's environment, ssh workers read it from their stdin.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "common/python_float.h"
#include "hosts.h"
#include "network.h"
#include "options.h"

namespace hvd::launcher {

using EnvMap = std::map<std::string, std::string>;

inline constexpr const char* kSecretEnv = "HOROVOD_SECRET_KEY";
// Set by horovod.run() so that it shares the job secret; never forwarded to workers.
inline constexpr const char* kDriverSecretEnv = "_HOROVOD_SECRET_KEY";

// True for names never forwarded: BASH_FUNC_*, OLDPWD, *CUDA_VISIBLE_DEVICES,
// _HOROVOD_SECRET_KEY, and HOROVOD_SECRET_KEY (the job sets its own).
bool isExcludedName(const std::string& name);

// The launcher's environment (`environ`) minus the excluded names.
EnvMap inheritedEnvironment();

// HOROVOD_* (and NCCL_IB_DISABLE) variables derived from the options, e.g.
// --fusion-threshold-mb 32 -> HOROVOD_FUSION_THRESHOLD=33554432, --cycle-time-ms 20 ->
// HOROVOD_CYCLE_TIME=20.0. Options left unset export nothing.
EnvMap knobEnvironment(const Options& options);

// Variables common to every worker of a job launched by this launcher.
EnvMap jobEnvironment(const NetworkChoice& network, int rendezvousPort);

// The workers' GLIBC_TUNABLES: `inherited`'s value with glibc.malloc.hugetlb=1 added, so that
// glibc asks for transparent huge pages on the large blocks it maps (PyTorch's CPU tensors come
// from malloc, and a fresh gradient every backward is a fresh mapping: one page fault per 2 MiB
// instead of one per 4 KiB, and far cheaper to unmap). Empty when HOROVOD_MALLOC_HUGEPAGES is
// false or `inherited` sets glibc.malloc.hugetlb itself (the user's choice wins). A glibc that
// does not know the tunable (< 2.35) ignores it. Throws UsageError on a malformed
// HOROVOD_MALLOC_HUGEPAGES.
EnvMap mallocEnvironment(const EnvMap& inherited);

// HOROVOD_RANK ... HOROVOD_CROSS_SIZE and HOROVOD_HOSTNAME for one slot.
EnvMap slotEnvironment(const SlotInfo& slot);

// 64 lower-case hex characters from /dev/urandom. Throws hvd::Error if it cannot be read.
std::string generateSecret();

// The job secret: $_HOROVOD_SECRET_KEY if horovod.run() passed one, else generateSecret().
std::string jobSecret();

// Merges layers left to right and renders "K=V" strings for execve.
std::vector<std::string> renderEnvironment(const std::vector<const EnvMap*>& layers);

}  // namespace hvd::launcher
