// Out-of-line members of the public value types (horovod.h) that the engine relies on.
#include "horovod/operation.h"

namespace hvd {

int64_t TensorView::numElements() const {
  int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

}  // namespace hvd
