// CPU executor: the beam_kernels.h functions over host vectors, rows split
// across threads (every output element is written by one thread, so the
// result does not depend on the thread count).
#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>
#include <memory>
#include <new>
#include <type_traits>
#include <utility>
#include <vector>

#include "beam_executor.h"
#include "protondose/core/error.h"
#include "protondose/core/parallel.h"
#include "protondose/engine/bev_grid.h"

namespace protondose::engine {
namespace {

using kernels::BevGeometry;

/// std::allocator, except that a value-initialising construct() (what
/// vector::resize does to new elements) leaves a trivial type uninitialised.
template <class T>
struct UninitializedAllocator : std::allocator<T> {
  template <class U>
  struct rebind {
    using other = UninitializedAllocator<U>;
  };
  UninitializedAllocator() = default;
  template <class U>
  UninitializedAllocator(const UninitializedAllocator<U>&) noexcept {}
  template <class U>
  void construct(U* p) noexcept(std::is_nothrow_default_constructible<U>::value) {
    ::new (static_cast<void*>(p)) U;
  }
  template <class U, class... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};

/// The stack arrays of the layer images and of the superposition output:
/// kernels::layer_ray and the superposer write every pixel, zeros included,
/// so sizing them need not clear them first — a serial fill of ~100 M-float
/// arrays that the worker threads then wrote over (plan03 at 2 mm: the
/// layer-image stage barely sped up from 1 to 2 threads). Their pages are
/// first touched by those threads.
using StackArray = std::vector<float, UninitializedAllocator<float>>;

/// A layer table in the type of kernels::layer_ray<Real>: the host vector
/// itself for double, a float copy kept in `copies` for float; null when empty.
const double* table_as(const std::vector<double>& v, std::deque<std::vector<double>>&) {
  return v.empty() ? nullptr : v.data();
}
const float* table_as(const std::vector<double>& v, std::deque<std::vector<float>>& copies) {
  if (v.empty()) return nullptr;
  copies.emplace_back(v.begin(), v.end());
  return copies.back().data();
}

template <class Real>
kernels::LayerTables<Real> bind(const HostLayerTables& h, std::deque<std::vector<Real>>& copies) {
  kernels::LayerTables<Real> t{};
  static_cast<kernels::LayerScalars&>(t) = h.scalars;
  t.fluence = h.fluence.data();
  t.curve = h.curve->data();
  t.curve_nodes = kernels::curve_node_count(*h.curve);
  t.energy_mev = table_as(*h.energy_mev, copies);
  t.scattering_factor = table_as(*h.scattering_factor, copies);
  t.halo_weight = table_as(*h.halo_weight, copies);
  t.halo_sigma_mm = table_as(*h.halo_sigma_mm, copies);
  t.wepl_nodes = static_cast<int>(h.energy_mev->size());
  t.air_sigma_x_mm = table_as(*h.air_sigma_x_mm, copies);
  t.air_sigma_y_mm = table_as(*h.air_sigma_y_mm, copies);
  return t;
}

/// Per row of the grid, what the layer images of its rays add up to.
struct RowSums {
  std::vector<double> energy_mev;
  std::vector<int> overshoot_px;
  std::vector<float> halo_variance_max_mm2;
};

class CpuBeamExecutor final : public BeamExecutor {
 public:
  CpuBeamExecutor(Superposer& superposer, int threads, LayerArithmetic arithmetic)
      : superposer_(superposer), threads_(threads), arithmetic_(arithmetic) {}
  bool on_device() const override { return false; }

  void set_patient(const PatientVolumes& v) override { patient_ = &v; }
  void begin_plan(const Grid3& og) override { plan_ = Volume<float>(og, 0.0f); }
  void begin_beam() override { beam_ = Volume<float>(plan_.grid, 0.0f); }

  /// The whole trace, at once.
  void start_trace(const BevGeometry& g, const kernels::Affine3& ct_index_from_beam,
                   const std::vector<double>& cutoffs) override {
    const std::size_t plane = g.plane(), pixels = plane * static_cast<std::size_t>(g.slices);
    rsp_.assign(pixels, 0.0f);
    density_.assign(pixels, 0.0f);
    wepl_far_.assign(pixels, 0.0f);
    rho_over_x_.assign(pixels, 0.0f);
    step_.assign(plane, 0.0f);
    kernels::TraceInput in{};
    in.grid = g;
    in.ct_index_from_beam = ct_index_from_beam;
    in.rsp = patient_->rsp.data.data();
    in.density_g_cm3 = patient_->density.data.data();
    for (int a = 0; a < 3; ++a) in.ct_size[a] = patient_->rsp.grid.size[a];
    in.inverse_length_table = patient_->inverse_length_table.data();
    in.inverse_length_nodes = static_cast<int>(patient_->inverse_length_table.size());
    in.inv_density_step = 1.0 / patient_->density_step_g_cm3;
    kernels::TraceOutput out{rsp_.data(), density_.data(), wepl_far_.data(), rho_over_x_.data(), step_.data()};
    std::vector<int> entry(plane), first(plane);
    parallel_for_chunks(static_cast<std::size_t>(g.rows), threads_, [&](std::size_t b, std::size_t e, int) {
      for (std::size_t r = b; r < e; ++r)
        for (int c = 0; c < g.cols; ++c) {
          const std::size_t ray = r * static_cast<std::size_t>(g.cols) + static_cast<std::size_t>(c);
          kernels::trace_ray(in, out, c, static_cast<int>(r), &entry[ray], &first[ray]);
        }
    });
    TraceSummary s;
    for (std::size_t ray = 0; ray < plane; ++ray) {
      if (entry[ray] >= 0 && (s.entry_slice < 0 || entry[ray] < s.entry_slice)) s.entry_slice = entry[ray];
      if (first[ray] >= 0 && (s.first_material_slice < 0 || first[ray] < s.first_material_slice))
        s.first_material_slice = first[ray];
    }
    s.slices_before_cutoff = slices_before_cutoffs(g, s.first_material_slice, cutoffs);
    trace_summary_ = s;
  }
  TraceSummary trace_summary() override { return trace_summary_; }

  std::vector<int> slices_before_cutoffs(const BevGeometry& g, int first, const std::vector<double>& cutoffs) const {
    const std::size_t plane = g.plane();
    std::vector<int> most(cutoffs.size(), 0);
    if (first < 0) return most;
    parallel_for_chunks(cutoffs.size(), threads_, [&](std::size_t b, std::size_t e, int) {
      for (std::size_t l = b; l < e; ++l)
        for (std::size_t ray = 0; ray < plane; ++ray)
          most[l] = std::max(most[l], kernels::slices_before_cutoff(wepl_far_.data(), plane, ray, first, g.slices, cutoffs[l]));
    });
    return most;
  }

  void begin_bev(std::size_t pixels) override { bev_.assign(pixels, 0.0f); }

  LayerImagesSummary layer_images(const kernels::LayerStackArgs& shared_in, std::size_t stack_slices,
                                  std::vector<HostLayerTables>& layers, bool halo) override {
    const BevGeometry& g = shared_in.grid;
    const std::size_t n = stack_slices * g.plane();
    // No clearing: kernels::layer_ray writes every pixel of the stack.
    image_.resize(n);
    sigma_x_.resize(n);
    sigma_y_.resize(n);
    halo_image_.resize(halo ? n : 0);
    halo_variance_.resize(halo ? n : 0);
    BevGrid bev;  // the spreading's view of the grid: the isocentre-plane rays
    bev.x0_mm = g.x0_mm;
    bev.y0_mm = g.y0_mm;
    bev.pitch_x_mm = g.pitch_x_mm;
    bev.pitch_y_mm = g.pitch_y_mm;
    bev.depth_step_mm = g.depth_step_mm;
    bev.cols = g.cols;
    bev.rows = g.rows;
    bev.slices = 1;
    parallel_for_chunks(layers.size(), threads_, [&](std::size_t b, std::size_t e, int) {
      for (std::size_t l = b; l < e; ++l)
        layers[l].fluence = spread_spots_to_rays(bev, *layers[l].spots, layers[l].scalars.spread_sigma_x_iso_mm,
                                                 layers[l].scalars.spread_sigma_y_iso_mm, shared_in.spot_cutoff_sigmas);
    });
    const kernels::LayerStackArgs s =
        bind_stack(shared_in, {wepl_far_.data(), density_.data(), rho_over_x_.data(), step_.data(), image_.data(),
                               sigma_x_.data(), sigma_y_.data(), halo ? halo_image_.data() : nullptr,
                               halo ? halo_variance_.data() : nullptr});
    RowSums rows{std::vector<double>(static_cast<std::size_t>(g.rows), 0.0),
                 std::vector<int>(static_cast<std::size_t>(g.rows), std::numeric_limits<int>::min()),
                 std::vector<float>(static_cast<std::size_t>(g.rows), 0.0f)};
    if (arithmetic_ == LayerArithmetic::kFloat) fill_layers<float>(s, layers, rows);
    else fill_layers<double>(s, layers, rows);
    LayerImagesSummary out;
    out.overshoot_px = std::numeric_limits<int>::min();
    for (std::size_t r = 0; r < rows.energy_mev.size(); ++r) {
      out.energy_mev += rows.energy_mev[r];
      out.overshoot_px = std::max(out.overshoot_px, rows.overshoot_px[r]);
      out.max_halo_variance_mm2 = std::max(out.max_halo_variance_mm2, static_cast<double>(rows.halo_variance_max_mm2[r]));
    }
    return out;
  }

  std::size_t superpose_stack(const BevGeometry& g, std::size_t stack_slices,
                              const std::vector<HostLayerTables>& layers) override {
    const std::size_t plane = g.plane();
    stack_out_.resize(stack_slices * plane);  // every pixel written by the superposer
    SuperpositionInput in;
    in.shape = {static_cast<int>(stack_slices), g.rows, g.cols};
    in.image = {image_.data(), image_.size()};
    in.sigma_x_px = {sigma_x_.data(), sigma_x_.size()};
    in.sigma_y_px = {sigma_y_.data(), sigma_y_.size()};
    superposer_.superpose(in, stack_out_.data());
    add_depth_groups(depth_groups(layers, g.slices), stack_out_.data(), plane, bev_.data());
    return 0;
  }

  /// The whole halo, at once.
  void start_halo(const BevGeometry& fine, const BevGeometry& hg, const kernels::HaloBinning& h,
                  std::size_t stack_slices, const std::vector<HostLayerTables>& layers,
                  const kernels::Affine3& beam_from_out_index) override {
    const std::size_t plane = fine.plane(), hplane = hg.plane();
    const std::vector<int> depth_slice = stack_depth_slices(layers, stack_slices);
    std::vector<float> image(stack_slices * hplane), sx(stack_slices * hplane), sy(stack_slices * hplane);
    parallel_for_chunks(stack_slices, threads_, [&](std::size_t b, std::size_t e, int) {
      for (std::size_t st = b; st < e; ++st) {
        const double d = hg.depth_mm(depth_slice[st]);
        const double px = hg.pitch_x_mm * hg.magnification_x(d), py = hg.pitch_y_mm * hg.magnification_y(d);
        for (int r = 0; r < hg.rows; ++r)
          for (int c = 0; c < hg.cols; ++c) {
            const std::size_t q = st * hplane + static_cast<std::size_t>(r) * hg.cols + c;
            kernels::halo_bin_pixel(h, halo_image_.data() + st * plane, halo_variance_.data() + st * plane, r, c, px,
                                    py, &image[q], &sx[q], &sy[q]);
          }
      }
    });
    StackArray out(stack_slices * hplane);  // every pixel written by the superposer
    SuperpositionInput in;
    in.shape = {static_cast<int>(stack_slices), hg.rows, hg.cols};
    in.image = {image.data(), image.size()};
    in.sigma_x_px = {sx.data(), sx.size()};
    in.sigma_y_px = {sy.data(), sy.size()};
    superposer_.superpose(in, out.data());
    std::vector<float> halo_bev(hplane * static_cast<std::size_t>(hg.slices), 0.0f);
    add_depth_groups(depth_groups(layers, hg.slices), out.data(), hplane, halo_bev.data());
    resample_into_beam(hg, halo_bev.data(), beam_from_out_index);
  }

  /// The plan is scaled and checked by finish_plan (last_beam_plan_scale unused).
  BeamDoseCheck finish_beam(const BevGeometry& g, const kernels::Affine3& beam_from_out_index, bool dose_to_water,
                            std::optional<double> /*last_beam_plan_scale*/) override {
    resample_into_beam(g, bev_.data(), beam_from_out_index);
    BeamDoseCheck c;
    const Volume<float>& mass = dose_to_water ? patient_->output_rsp() : patient_->output_density();
    for (std::size_t i = 0; i < beam_.data.size(); ++i) {
      const float v = beam_.data[i];
      if (!std::isfinite(v) || v < 0.0f) {
        c.first_bad_voxel = static_cast<long long>(i);
        c.bad_value = v;
        return c;
      }
      c.dose_times_density += static_cast<double>(v) * mass.data[i];
    }
    for (std::size_t i = 0; i < beam_.data.size(); ++i) plan_.data[i] += beam_.data[i];
    return c;
  }

  PlanDoseSummary finish_plan(double scale) override {
    PlanDoseSummary p;
    for (std::size_t i = 0; i < plan_.data.size(); ++i) {
      float& v = plan_.data[i];
      if (scale != 1.0) v = static_cast<float>(v * scale);
      if (!std::isfinite(v) || v < 0.0f) {
        if (p.first_bad_voxel < 0) {
          p.first_bad_voxel = static_cast<long long>(i);
          p.bad_value = v;
        }
        continue;
      }
      p.max_dose = std::max(p.max_dose, static_cast<double>(v));
    }
    return p;
  }

  Volume<float> beam_dose() override { return beam_; }
  Volume<float> plan_dose() override { return plan_; }

 private:
  /// The stack of every layer, layer by layer, with kernels::layer_ray<Real>.
  template <class Real>
  void fill_layers(const kernels::LayerStackArgs& s, const std::vector<HostLayerTables>& layers, RowSums& rows) {
    const BevGeometry& g = s.grid;
    for (const HostLayerTables& h : layers) {
      std::deque<std::vector<Real>> copies;
      const kernels::LayerTables<Real> t = bind(h, copies);
      const kernels::LayerRayConstants<Real> constants = kernels::layer_ray_constants<Real>(g, t);
      parallel_for_chunks(static_cast<std::size_t>(g.rows), threads_, [&](std::size_t b, std::size_t e, int) {
        for (std::size_t r = b; r < e; ++r) {
          double energy = 0;
          int overshoot = rows.overshoot_px[r];
          float halo_variance_max = rows.halo_variance_max_mm2[r];
          for (int c = 0; c < g.cols; ++c)
            energy += kernels::layer_ray(s, t, constants, c, static_cast<int>(r), &overshoot, &halo_variance_max);
          rows.energy_mev[r] += energy;
          rows.overshoot_px[r] = overshoot;
          rows.halo_variance_max_mm2[r] = halo_variance_max;
        }
      });
    }
  }

  /// Each group's stack slices added into its plane of `bev`, in order.
  static void add_depth_groups(const DepthGroups& groups, const float* stack, std::size_t plane, float* bev) {
    for (std::size_t d = 0; d + 1 < groups.member_begin.size(); ++d) {
      float* dst = bev + d * plane;
      for (int m = groups.member_begin[d]; m < groups.member_begin[d + 1]; ++m) {
        const float* src = stack + static_cast<std::size_t>(groups.member_slices[static_cast<std::size_t>(m)]) * plane;
        for (std::size_t q = 0; q < plane; ++q) dst[q] += src[q];
      }
    }
  }

  void resample_into_beam(const BevGeometry& g, const float* bev, const kernels::Affine3& beam_from_out_index) {
    const Grid3& og = beam_.grid;
    parallel_for_chunks(static_cast<std::size_t>(og.size[2]), threads_, [&](std::size_t b, std::size_t e, int) {
      for (std::size_t k = b; k < e; ++k)
        for (int j = 0; j < og.size[1]; ++j)
          for (int i = 0; i < og.size[0]; ++i)
            kernels::resample_voxel(g, bev, beam_from_out_index, i, j, static_cast<int>(k),
                                    &beam_.data[og.index(i, j, static_cast<int>(k))]);
    });
  }

  Superposer& superposer_;
  int threads_;
  LayerArithmetic arithmetic_;
  const PatientVolumes* patient_ = nullptr;
  TraceSummary trace_summary_;  ///< of the last start_trace
  Volume<float> plan_, beam_;
  std::vector<float> rsp_, density_, wepl_far_, rho_over_x_, step_;
  std::vector<float> bev_;
  StackArray image_, sigma_x_, sigma_y_, halo_image_, halo_variance_;
  StackArray stack_out_;  ///< the stack's superposition, reused by every group and beam
};

}  // namespace

std::unique_ptr<BeamExecutor> make_cpu_beam_executor(Superposer& superposer, int threads, LayerArithmetic arithmetic) {
  return std::make_unique<CpuBeamExecutor>(superposer, threads, arithmetic);
}

}  // namespace protondose::engine
