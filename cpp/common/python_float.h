// Numbers in messages as Horovod's Python code prints them.
#pragma once

#include <string>

namespace hvd {

// A double as Python's repr() writes it: 20.0, 0.5, 1e-05.
std::string pythonFloat(double value);

}  // namespace hvd
