// Built instead of the CUDA sources when protondose is configured without CUDA:
// the same API, every GPU entry point raising UnavailableError. No #ifdef
// anywhere else.
#include <string>

#include "backends.h"
#include "protondose/core/error.h"
#include "protondose/gpu/device_superposition.h"

namespace protondose {
namespace {

[[noreturn]] void throw_built_without_cuda(const std::string& what) {
  throw UnavailableError(what +
                         " needs a GPU, but this protondose was built without CUDA "
                         "(PROTONDOSE_ENABLE_CUDA=OFF or no nvcc at configure time); "
                         "use the cpu backend or rebuild with CUDA");
}

}  // namespace

bool built_with_cuda() { return false; }
int gpu_device_count() { return 0; }
GpuDeviceInfo gpu_device_info(int) { throw_built_without_cuda("gpu_device_info"); }
GpuStartTimings initialize_gpu_device(int) { throw_built_without_cuda("initialize_gpu_device"); }
std::size_t gpu_free_memory_bytes(int) { throw_built_without_cuda("gpu_free_memory_bytes"); }

std::unique_ptr<Superposer> make_gpu_superposer(SuperpositionMethod method,
                                                const SuperpositionOptions&) {
  throw_built_without_cuda(std::string("superposition method '") + method_name(method) + "'");
}

struct DeviceSuperposer::Impl {};
DeviceSuperposer::DeviceSuperposer(SuperpositionMethod method, const SuperpositionOptions&) {
  throw_built_without_cuda(std::string("superposition method '") + method_name(method) + "'");
}
DeviceSuperposer::~DeviceSuperposer() = default;
void DeviceSuperposer::superpose_device(const SuperpositionInput&, float*) {
  throw_built_without_cuda("DeviceSuperposer");
}
void DeviceSuperposer::queue_analysis(const SuperpositionInput&, float*, void*) {
  throw_built_without_cuda("DeviceSuperposer");
}
SuperpositionMethod DeviceSuperposer::method() const { return SuperpositionMethod::kCpuReference; }
DeviceSuperposer::Split DeviceSuperposer::last_split() const { return {}; }
float* DeviceSuperposer::allocate_device_floats(std::size_t, int) { throw_built_without_cuda("device memory"); }
void DeviceSuperposer::free_device(void*) {}
void DeviceSuperposer::copy_to_device(float*, const float*, std::size_t) {
  throw_built_without_cuda("device memory");
}
void DeviceSuperposer::copy_to_host(float*, const float*, std::size_t) {
  throw_built_without_cuda("device memory");
}

}  // namespace protondose

namespace protondose {

std::unique_ptr<Convolver> make_gpu_convolver(ConvolutionMethod method, const SuperpositionOptions&) {
  throw UnavailableError(std::string("convolution method '") + method_name(method) +
                         "' needs a GPU, but this protondose was built without CUDA "
                         "(PROTONDOSE_ENABLE_CUDA=OFF or no nvcc at configure time)");
}

}  // namespace protondose

#include "bench_hooks.h"

namespace protondose::bench {

const char* variant_name(SuperpositionVariant) { return "unavailable"; }
Timing time_superposition(SuperpositionVariant, const SuperpositionInput&, const SuperpositionOptions&, int, int, int) {
  throw UnavailableError("GPU benchmark: this protondose was built without CUDA");
}
Timing time_convolution(ConvolutionMethod, const UniformSigmaInput&, const SuperpositionOptions&, int, int) {
  throw UnavailableError("GPU benchmark: this protondose was built without CUDA");
}

}  // namespace protondose::bench
