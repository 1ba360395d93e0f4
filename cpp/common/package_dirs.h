// The Python package folders (site-packages) of the interpreter this core runs in, for code that
// looks for libraries installed by Python wheels (the CUDA loader: the nvidia-* wheels). The
// binding (horovod._core) sets them from sys.path when it is imported; a C++ program has none.
//
// Thread-safe.
#pragma once

#include <string>
#include <vector>

namespace hvd {

// Replaces the list (in the interpreter's search order).
void setPythonPackageDirs(std::vector<std::string> dirs);
std::vector<std::string> pythonPackageDirs();

}  // namespace hvd
