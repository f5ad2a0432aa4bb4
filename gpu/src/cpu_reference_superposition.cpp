// The CPU oracle: a plain double-precision scatter (Algorithm 1, right, of da
// Silva et al.), parallel over fixed bands of rows so that the arithmetic — and
// so the result — does not depend on the number of threads.
#include <algorithm>
#include <vector>

#include "protondose/core/parallel.h"
#include "protondose/gpu/gaussian_kernel.h"
#include "backends.h"
#include "protondose/gpu/superposition.h"

namespace protondose {
namespace {

// Rows per band. Each band scatters into a private buffer; the buffers of a
// slice are summed in band order.
constexpr int kBandRows = 32;

struct BandPartial {
  int first_row = 0;           // output row of buffer row 0 (may be < 0 before clipping)
  int row_count = 0;
  std::vector<double> values;  // row_count x cols
};

BandPartial scatter_band(const SuperpositionInput& in, float cutoff, int slice, int band) {
  const int rows = in.shape.rows, cols = in.shape.cols;
  const std::size_t plane = static_cast<std::size_t>(rows) * cols;
  const float* image = in.image.data + slice * plane;
  const float* sigma_x = in.sigma_x_px.data + slice * plane;
  const float* sigma_y = in.sigma_y_px.data + slice * plane;
  const int row_begin = band * kBandRows;
  const int row_end = std::min(rows, row_begin + kBandRows);

  int max_ry = 0;
  for (std::size_t i = static_cast<std::size_t>(row_begin) * cols;
       i < static_cast<std::size_t>(row_end) * cols; ++i)
    if (image[i] != 0.0f) max_ry = std::max(max_ry, gaussian_radius_px(sigma_y[i], cutoff));

  BandPartial part;
  part.first_row = std::max(0, row_begin - max_ry);
  part.row_count = std::min(rows, row_end + max_ry) - part.first_row;
  part.values.assign(static_cast<std::size_t>(part.row_count) * cols, 0.0);

  std::vector<double> kx, ky, kx_row;
  for (int y = row_begin; y < row_end; ++y) {
    for (int x = 0; x < cols; ++x) {
      const std::size_t i = static_cast<std::size_t>(y) * cols + x;
      const double value = image[i];
      if (value == 0.0) continue;
      const int rx = gaussian_radius_px(sigma_x[i], cutoff);
      const int ry = gaussian_radius_px(sigma_y[i], cutoff);
      kx.resize(rx + 1);
      ky.resize(ry + 1);
      for (int d = 0; d <= rx; ++d) kx[d] = pixel_integrated_gaussian(d, sigma_x[i]);
      for (int d = 0; d <= ry; ++d) ky[d] = pixel_integrated_gaussian(d, sigma_y[i]);
      const int x0 = std::max(0, x - rx), x1 = std::min(cols - 1, x + rx);
      const int y0 = std::max(0, y - ry), y1 = std::min(rows - 1, y + ry);
      // The x weights of the clipped row laid out contiguously, so the inner
      // loop is a plain axpy the compiler vectorises (the same products and
      // sums per output pixel as indexing kx[|xo − x|]).
      kx_row.resize(static_cast<std::size_t>(x1 - x0 + 1));
      for (int xo = x0; xo <= x1; ++xo) kx_row[static_cast<std::size_t>(xo - x0)] = kx[std::abs(xo - x)];
      const double* __restrict k = kx_row.data();
      const int n = x1 - x0 + 1;
      for (int yo = y0; yo <= y1; ++yo) {
        const double wy = value * ky[std::abs(yo - y)];
        double* __restrict row = part.values.data() + static_cast<std::size_t>(yo - part.first_row) * cols + x0;
        for (int j = 0; j < n; ++j) row[j] += wy * k[j];
      }
    }
  }
  return part;
}

/// The oracle's sum, handed out one slice at a time: emit(slice, values)
/// with the slice's plane in double, on the worker threads (each slice once).
/// Each band of rows scatters into its own buffer, and a slice's bands are
/// added in band order, so the result does not depend on the thread count.
template <class Emit>
void superpose_by_slice(const SuperpositionInput& input, const SuperpositionOptions& options, Emit&& emit) {
  validate_superposition_input(input, options);
  const StackShape& shape = input.shape;
  const float cutoff = static_cast<float>(options.cutoff_sigmas);
  const int bands_per_slice = (shape.rows + kBandRows - 1) / kBandRows;
  const int threads = options.cpu_threads > 0 ? options.cpu_threads : default_thread_count();
  const std::size_t plane = static_cast<std::size_t>(shape.rows) * shape.cols;

  // Slices are processed in batches so that the band buffers stay bounded:
  // 4 bands per thread, but at least 4 slices (with 1, a 184-row slice on 2
  // threads was a batch of its own, and the threads were started twice per
  // slice).
  const int slices_per_batch = std::max(4, 4 * threads / bands_per_slice);
  for (int first = 0; first < shape.slices; first += slices_per_batch) {
    const int last = std::min(shape.slices, first + slices_per_batch);
    const std::size_t items = static_cast<std::size_t>(last - first) * bands_per_slice;
    std::vector<BandPartial> partials(items);
    parallel_for_chunks(items, threads, [&](std::size_t begin, std::size_t end, int) {
      for (std::size_t item = begin; item < end; ++item)
        partials[item] = scatter_band(input, cutoff, first + static_cast<int>(item / bands_per_slice),
                                      static_cast<int>(item % bands_per_slice));
    });
    // Ordered reduction: band 0, 1, ... of each slice (slices are independent).
    parallel_for_chunks(static_cast<std::size_t>(last - first), threads,
                        [&](std::size_t begin, std::size_t end, int) {
                          std::vector<double> sum(plane);
                          for (std::size_t s = begin; s < end; ++s) {
                            std::fill(sum.begin(), sum.end(), 0.0);
                            for (int b = 0; b < bands_per_slice; ++b) {
                              const BandPartial& p = partials[s * bands_per_slice + b];
                              double* dst = sum.data() + static_cast<std::size_t>(p.first_row) * shape.cols;
                              for (std::size_t k = 0; k < p.values.size(); ++k) dst[k] += p.values[k];
                            }
                            emit(first + static_cast<int>(s), sum.data());
                          }
                        });
  }
}

}  // namespace

std::vector<double> superpose_cpu_reference(const SuperpositionInput& input,
                                            const SuperpositionOptions& options) {
  const std::size_t plane = static_cast<std::size_t>(input.shape.rows) * input.shape.cols;
  std::vector<double> output(input.shape.pixel_count(), 0.0);
  superpose_by_slice(input, options, [&](int slice, const double* values) {
    std::copy(values, values + plane, output.data() + static_cast<std::size_t>(slice) * plane);
  });
  return output;
}

namespace {

class CpuReferenceSuperposer final : public Superposer {
 public:
  explicit CpuReferenceSuperposer(const SuperpositionOptions& options) : options_(options) {}
  SuperpositionMethod method() const override { return SuperpositionMethod::kCpuReference; }
  /// Straight into the float output, slice by slice on the worker threads:
  /// no stack-sized double array to clear and convert serially.
  void superpose(const SuperpositionInput& input, float* output) override {
    const std::size_t plane = static_cast<std::size_t>(input.shape.rows) * input.shape.cols;
    superpose_by_slice(input, options_, [&](int slice, const double* values) {
      float* out = output + static_cast<std::size_t>(slice) * plane;
      for (std::size_t q = 0; q < plane; ++q) out[q] = static_cast<float>(values[q]);
    });
  }

 private:
  SuperpositionOptions options_;
};

}  // namespace

std::unique_ptr<Superposer> make_cpu_reference_superposer(const SuperpositionOptions& options) {
  return std::make_unique<CpuReferenceSuperposer>(options);
}

}  // namespace protondose
