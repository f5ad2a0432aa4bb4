#include "backends.h"
#include "protondose/core/error.h"

namespace protondose {

std::unique_ptr<Superposer> make_superposer(SuperpositionMethod method,
                                            const SuperpositionOptions& options) {
  if (method == SuperpositionMethod::kCpuReference) return make_cpu_reference_superposer(options);
  return make_gpu_superposer(method, options);
}

}  // namespace protondose
