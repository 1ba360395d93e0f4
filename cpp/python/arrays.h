// Conversion between Python arrays (anything exporting DLPack or the buffer protocol) and the
// core's TensorView/OwnedTensor, without copying.
//
// Called from the binding's entry points with the GIL held. A TensorView made by toView() points
// into the Python array's memory: the caller keeps the nb::ndarray alive until the operation
// using the view has completed (PyWork does that).
#pragma once

#include <nanobind/ndarray.h>

#include "horovod/horovod.h"

namespace hvd::py {

namespace nb = nanobind;

// Input arrays are only read: asking nanobind for read-only arrays lets producers hand out their
// cheaper unversioned DLPack capsule.
using InArray = nb::ndarray<nb::ro>;
// Arrays the engine writes into (outputs, in-place tensors).
using OutArray = nb::ndarray<>;
// Arrays handed back to Python: an object with __dlpack__/__dlpack_device__ and the buffer
// protocol, so torch.from_dlpack, np.asarray and friends wrap it without a copy.
using ResultArray = nb::ndarray<nb::array_api>;

// Devices (DLPack device type -> hvd::Device):
//   kDLCPU, kDLCUDAHost, kDLROCMHost -> the CPU (pinned host memory is host memory);
//   kDLCUDA, kDLCUDAManaged          -> DeviceKind::kCuda with the DLPack device ordinal (managed
//                                       memory is ordered by streams like device memory, so it
//                                       takes the device path, never a host read racing a kernel);
//   kDLROCM                          -> DeviceKind::kRocm;
//   anything else                    -> InvalidArgument naming the device type.
// Whether a backend serves the device is the engine's decision (InvalidArgument naming the device
// when none does), not this file's.
//
// The producer stream of a device tensor (hvd::Device::stream), from `stream`:
//   an int      the stream handle itself (cudaStream_t as an integer; 0 = the default stream;
//               -1 = unknown: Device::deviceWideStream(), ordered by the whole GPU);
//   a callable  called as stream(device_ordinal) -> int, only when a tensor is on a device (the
//               adapters pass one fixed function, so CPU tensors cost no Python call);
//   None        the default stream (null): right for arrays imported through __dlpack__(), whose
//               producer makes its work visible on the legacy default stream (DLPack's contract
//               for stream=None), and for capsules whose producer ran there.
// Unused for CPU tensors.

// Checks device, dtype and C-contiguity; throws InvalidArgument with a message naming `what`
// otherwise.
template <typename Array>
TensorView toView(const Array& array, const char* what, nb::handle stream = nb::handle());

// The same for an unconsumed DLPack capsule ("dltensor", what torch.utils.dlpack.to_dlpack
// returns), read in place: fills `view` (reusing its shape's storage) and returns true, or returns
// false for any other object. The capsule is not consumed: the caller keeps it alive while the
// view is in use, and its own destructor releases the tensor.
bool viewOfCapsule(nb::handle capsule, TensorView& view, const char* what,
                   nb::handle stream = nb::handle());

// Wraps an engine-allocated tensor; the returned array's owner keeps `tensor.storage` alive. A
// tensor on a device comes back as a DLPack array of that device (kDLCUDA, its ordinal); its
// memory is ready to use on any stream (a Work completes once the device has finished).
ResultArray toResult(const OwnedTensor& tensor);

}  // namespace hvd::py
