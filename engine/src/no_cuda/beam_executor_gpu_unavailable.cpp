// Built without CUDA: the GPU backends exist in the API and say why they cannot run.
#include "../beam_executor.h"
#include "protondose/core/error.h"

namespace protondose::engine {

std::unique_ptr<BeamExecutor> make_gpu_beam_executor(SuperpositionMethod method, const SuperpositionOptions&) {
  throw UnavailableError(std::string("GPU backend (") + method_name(method) +
                         "): protondose was built without CUDA (PROTONDOSE_ENABLE_CUDA=OFF or no nvcc)");
}

}  // namespace protondose::engine
