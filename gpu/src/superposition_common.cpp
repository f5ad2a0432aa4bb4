// Input validation and names shared by every superposition backend.
#include <cmath>
#include <sstream>

#include "protondose/core/error.h"
#include "protondose/gpu/gaussian_kernel.h"
#include "protondose/gpu/superposition.h"

namespace protondose {

const char* method_name(SuperpositionMethod method) {
  switch (method) {
    case SuperpositionMethod::kCpuReference: return "cpu-reference";
    case SuperpositionMethod::kGpuGatherExact: return "gpu-gather-exact";
    case SuperpositionMethod::kGpuScatterAtomic: return "gpu-scatter-atomic";
    case SuperpositionMethod::kGpuScatterTiled: return "gpu-scatter-tiled";
    case SuperpositionMethod::kGpuScatterRegisterBlocked: return "gpu-scatter-register-blocked";
    case SuperpositionMethod::kGpuScatterTensorCore: return "gpu-scatter-tensor-core";
  }
  return "unknown";
}

int kernel_radius_px(float sigma_px, float cutoff_sigmas) {
  return gaussian_radius_px(sigma_px, cutoff_sigmas);
}

namespace {

std::string pixel_name(const StackShape& shape, std::size_t index) {
  const std::size_t plane = static_cast<std::size_t>(shape.rows) * shape.cols;
  std::ostringstream s;
  s << "slice " << index / plane << ", row " << (index % plane) / shape.cols << ", col "
    << index % shape.cols;
  return s.str();
}

void check_span(const char* what, const ConstFloatSpan& span, const StackShape& shape) {
  if (span.data == nullptr)
    throw InputError(std::string("superposition: ") + what + " is missing (null pointer)");
  if (span.size != shape.pixel_count()) {
    std::ostringstream m;
    m << "superposition: " << what << " has " << span.size << " values but the stack "
      << shape.slices << " x " << shape.rows << " x " << shape.cols << " needs "
      << shape.pixel_count();
    throw InputError(m.str());
  }
}

}  // namespace

void validate_superposition_input(const SuperpositionInput& input,
                                  const SuperpositionOptions& options) {
  if (input.groups.count != 0)
    throw InputError("superposition: slice groups (SuperpositionInput::groups) are for device calls only "
                     "(DeviceSuperposer::superpose_device); superpose() returns the whole stack");
  const StackShape& shape = input.shape;
  if (shape.slices <= 0 || shape.rows <= 0 || shape.cols <= 0) {
    std::ostringstream m;
    m << "superposition: stack shape " << shape.slices << " x " << shape.rows << " x "
      << shape.cols << " (slices x rows x cols) must be positive in every dimension";
    throw InputError(m.str());
  }
  if (!(options.cutoff_sigmas > 0.0 && options.cutoff_sigmas <= 10.0)) {
    std::ostringstream m;
    m << "superposition: cut-off " << options.cutoff_sigmas
      << " sigma is outside the accepted range (0, 10]";
    throw InputError(m.str());
  }
  check_span("image", input.image, shape);
  check_span("sigma_x_px", input.sigma_x_px, shape);
  check_span("sigma_y_px", input.sigma_y_px, shape);

  const float cutoff = static_cast<float>(options.cutoff_sigmas);
  const std::size_t n = shape.pixel_count();
  for (std::size_t i = 0; i < n; ++i) {
    const float value = input.image.data[i];
    if (!(value >= 0.0f) || !std::isfinite(value)) {
      std::ostringstream m;
      m << "superposition: image value " << value << " at " << pixel_name(shape, i)
        << " is not a finite number >= 0";
      throw InputError(m.str());
    }
    for (const auto* axis : {&input.sigma_x_px, &input.sigma_y_px}) {
      const float sigma = axis->data[i];
      const char* name = axis == &input.sigma_x_px ? "sigma_x" : "sigma_y";
      if (!(sigma >= 0.0f) || !std::isfinite(sigma)) {
        std::ostringstream m;
        m << "superposition: " << name << " = " << sigma << " px at " << pixel_name(shape, i)
          << " is not a finite number >= 0";
        throw InputError(m.str());
      }
      if (gaussian_radius_px(sigma, cutoff) > kMaxKernelRadiusPx) {
        std::ostringstream m;
        m << "superposition: " << name << " = " << sigma << " px at " << pixel_name(shape, i)
          << " needs a kernel radius of " << gaussian_radius_px(sigma, cutoff) << " px at "
          << options.cutoff_sigmas << " sigma; the accepted maximum is " << kMaxKernelRadiusPx
          << " px (sigma <= " << kMaxKernelRadiusPx / options.cutoff_sigmas << " px)";
        throw InputError(m.str());
      }
    }
  }
}

}  // namespace protondose
