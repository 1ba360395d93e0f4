// ShmSharedBuffers: the shm backend's SharedBufferAllocator (transport/peer_memory.h), registered
// at static initialisation, so hvd::allocateShared works before init and without a transport.
//
// Each buffer is its own anonymous memfd segment (segment.h): nothing has a name in /dev/shm; a
// peer opens it through /proc/<pid>/fd/<fd>, which works while this process holds the fd, i.e.
// while the buffer lives (PeerMappings, peer_mappings.h). A registry maps address ranges to
// segments so that find() can tell whether a range lies inside one buffer. It is process-wide on
// purpose: user code allocates these buffers before any runtime exists and keeps them across
// shutdown and re-init, so no runtime or transport can own them. Segment ids are unique in the
// process and never reused, so peers may cache their mappings by (pid, id).
//
// Thread-safe (any thread). A buffer is unregistered, its pages discarded, unmapped and its fd
// closed when the last reference to its storage goes: the memory is given back at once, although
// peers that mapped it keep their (now empty) mapping in their cache until evicted.
#pragma once

#include "transport/peer_memory.h"

namespace hvd::shm {

// The process's allocator (never destroyed: buffers may outlive static teardown).
SharedBufferAllocator& sharedBuffers();

}  // namespace hvd::shm
