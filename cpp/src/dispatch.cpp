// The LSA dispatcher: every public LSA entry point (the list LSA_NATIVE_LSA_API of lsa.hpp) checks
// its arguments once, here, then runs the backend the caller asked for through detail::use_cuda
// (dispatch.hpp: the one place that asks "was CUDA compiled, is a GPU there?"). Kernel attention
// dispatches in kernel_attention_dispatch.cpp; population's dispatcher is population.cpp (CPU only).
#include <atomic>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "cpu/lsa_cpu.hpp"
#include "dispatch.hpp"
#include "operands.hpp"
#include "lsa_native/device.hpp"
#include "lsa_native/lsa.hpp"
#if LSA_NATIVE_HAVE_CUDA
#include "cuda/lsa_cuda.hpp"
#endif

namespace lsa_native {

// The one place of the rules on E's extents (the bindings and Python only read E's shape).
void validate(const LsaShape& s) {
  detail::require(s.batch >= 1, "E: expected at least one prompt (B >= 1), got B = " +
                                    std::to_string(s.batch));
  detail::require(s.dim >= 1, "E: expected d+1 >= 2 rows (d >= 1), got d = " +
                                  std::to_string(s.dim));
  detail::require(s.context >= 1,
                  "E: expected N+1 >= 2 columns (context length N >= 1 plus the query), got N = " +
                      std::to_string(s.context));
  const index_t max = std::numeric_limits<index_t>::max();
  const index_t per_prompt_rows = s.dim + 1, cols = s.context + 1;
  detail::require(per_prompt_rows <= max / cols && per_prompt_rows * cols <= max / s.batch,
                  "E: B*(d+1)*(N+1) overflows a 64-bit index");
}

namespace detail {
namespace {
std::atomic<bool> cuda_emulated{false};
}  // namespace

void emulate_cuda_on_cpu(bool on) { cuda_emulated = on; }

bool use_cuda(Device device) {
  if (device == Device::cpu || cuda_emulated) return false;
  detail::require(cuda_compiled(),
                  "device='cuda': this build of lsa_native has no CUDA kernels (built without nvcc "
                  "or with LSA_NATIVE_CUDA=OFF); use device='cpu'");
  detail::require(cuda_available(),
                  "device='cuda': no CUDA device is visible (no GPU or no NVIDIA driver); use "
                  "device='cpu'");
  return true;
}
}  // namespace detail
using detail::require_pointer;

template <class T>
void lsa_predict(const LsaShape& shape, const T* E, const T* W_pv, const T* W_kq, T* y_hat,
                 Device device) {
  validate(shape);
  require_pointer(E, "E");
  require_pointer(W_pv, "W_pv");
  require_pointer(W_kq, "W_kq");
  require_pointer(y_hat, "y_hat");
  LSA_NATIVE_BACKEND(device, lsa_predict, shape, E, W_pv, W_kq, y_hat);
}

template <class T>
double lsa_loss_and_grad(const LsaShape& shape, const T* E, const T* y_q, const T* W_pv,
                         const T* W_kq, T* d_W_pv, T* d_W_kq, T* y_hat, Device device) {
  validate(shape);
  require_pointer(E, "E");
  require_pointer(y_q, "y_q");
  require_pointer(W_pv, "W_pv");
  require_pointer(W_kq, "W_kq");
  require_pointer(d_W_pv, "d_W_pv");
  require_pointer(d_W_kq, "d_W_kq");
  return LSA_NATIVE_BACKEND(device, lsa_loss_and_grad, shape, E, y_q, W_pv, W_kq, d_W_pv, d_W_kq,
                            y_hat);
}

template <class T>
void lsa_forward(const LsaShape& shape, const T* E, const T* W_pv, const T* W_kq, T* F,
                 Device device) {
  validate(shape);
  require_pointer(E, "E");
  require_pointer(W_pv, "W_pv");
  require_pointer(W_kq, "W_kq");
  require_pointer(F, "F");
  LSA_NATIVE_BACKEND(device, lsa_forward, shape, E, W_pv, W_kq, F);
}

template <class T>
void lsa_vjp(const LsaShape& shape, const T* E, const T* W_pv, const T* W_kq, const T* d_F,
             T* d_W_pv, T* d_W_kq, T* d_E, Device device) {
  validate(shape);
  require_pointer(E, "E");
  require_pointer(W_pv, "W_pv");
  require_pointer(W_kq, "W_kq");
  require_pointer(d_F, "d_F");
  require_pointer(d_W_pv, "d_W_pv");
  require_pointer(d_W_kq, "d_W_kq");
  LSA_NATIVE_BACKEND(device, lsa_vjp, shape, E, W_pv, W_kq, d_F, d_W_pv, d_W_kq, d_E);
}

template <class T>
void lsa_predict_vjp(const LsaShape& shape, const T* E, const T* W_pv, const T* W_kq,
                     const T* d_y, T* d_W_pv, T* d_W_kq, T* d_E, Device device) {
  validate(shape);
  require_pointer(E, "E");
  require_pointer(W_pv, "W_pv");
  require_pointer(W_kq, "W_kq");
  require_pointer(d_y, "d_y");
  require_pointer(d_W_pv, "d_W_pv");
  require_pointer(d_W_kq, "d_W_kq");
  LSA_NATIVE_BACKEND(device, lsa_predict_vjp, shape, E, W_pv, W_kq, d_y, d_W_pv, d_W_kq, d_E);
}

// ---- the view entry points (array_view.hpp): validate() once, then the backend the views ask for

namespace {
using detail::require_input;
using detail::require_output;
using detail::in;
using detail::out;

// The operands every LSA entry point reads: E, W_pv, W_kq [d+1, d+1] in E's dtype.
LsaShape validate_parameters(const ArrayView& E, const ArrayView& W_pv, const ArrayView& W_kq) {
  const LsaShape s = detail::prompt_shape(E);
  require_input(W_pv, {s.dim + 1, s.dim + 1}, E);
  require_input(W_kq, {s.dim + 1, s.dim + 1}, E);
  return s;
}

std::vector<index_t> prompts_shape(const LsaShape& s) { return {s.batch, s.dim + 1, s.context + 1}; }
std::vector<index_t> square(const LsaShape& s) { return {s.dim + 1, s.dim + 1}; }

// An LSA call after validate(): the shape and the device it runs on.
struct LsaCall {
  LsaShape shape;
  Device device;
};

// validate() of lsa_predict and lsa_forward: E, W_pv, W_kq and the output `out` (y_hat [B] or
// F [B, d+1, N+1]).
LsaCall validate_forward(const ArrayView& E, const ArrayView& W_pv, const ArrayView& W_kq,
                         const ArrayView& out, bool full, DeviceChoice choice) {
  const LsaShape s = validate_parameters(E, W_pv, W_kq);
  require_output(out, full ? prompts_shape(s) : std::vector<index_t>{s.batch}, E,
                 {&E, &W_pv, &W_kq});
  return {s, detail::choose_device(choice, {&E, &W_pv, &W_kq, &out})};
}

// validate() of lsa_loss_and_grad: E, y_q [B], W_pv, W_kq and the outputs the caller passed
// (dW_pv, dW_kq, y_hat [B], loss float64 [1]).
LsaCall validate_loss(const ArrayView& E, const ArrayView& y_q, const ArrayView& W_pv,
                      const ArrayView& W_kq, const ArrayView& d_W_pv, const ArrayView& d_W_kq,
                      const ArrayView& y_hat, const ArrayView& loss, DeviceChoice choice) {
  const LsaShape s = validate_parameters(E, W_pv, W_kq);
  require_input(y_q, {s.batch}, E);
  const std::initializer_list<const ArrayView*> inputs = {&E, &y_q, &W_pv, &W_kq};
  detail::require_loss_outputs(d_W_pv, d_W_kq, y_hat, loss, square(s), s.batch, E, inputs);
  return {s, detail::choose_device(choice, {&E, &y_q, &W_pv, &W_kq, &d_W_pv, &d_W_kq, &y_hat, &loss})};
}

// validate() of lsa_vjp and lsa_predict_vjp: E, W_pv, W_kq and the upstream gradient (d_F
// [B, d+1, N+1] when `full`, else d_y [B]).
LsaCall validate_vjp(const ArrayView& E, const ArrayView& W_pv, const ArrayView& W_kq,
                     const ArrayView& upstream, bool full, DeviceChoice choice) {
  const LsaShape s = validate_parameters(E, W_pv, W_kq);
  require_input(upstream, full ? prompts_shape(s) : std::vector<index_t>{s.batch}, E,
                detail::Finite::any);
  return {s, detail::choose_device(choice, {&E, &W_pv, &W_kq, &upstream})};
}

}  // namespace

void lsa_predict(const ArrayView& E, const ArrayView& W_pv, const ArrayView& W_kq, ArrayView& y_hat,
                 DeviceChoice choice, CallSite& site) {
  const auto [s, device] = validate_forward(E, W_pv, W_kq, y_hat, false, choice);
  detail::make_outputs(site, E, {{&y_hat, {s.batch}}});
  detail::with_float(E, [&](auto t) {
    using T = decltype(t);
    site.run([&] {
      LSA_NATIVE_BACKEND(device, lsa_predict, s, in<T>(E), in<T>(W_pv), in<T>(W_kq), out<T>(y_hat));
    });
    if (device == Device::cuda)
      detail::check_host_outputs<T>({{"y_hat", &y_hat}}, {detail::host_input<T>(E)});
  });
}

void lsa_forward(const ArrayView& E, const ArrayView& W_pv, const ArrayView& W_kq, ArrayView& F,
                 DeviceChoice choice, CallSite& site) {
  const auto [s, device] = validate_forward(E, W_pv, W_kq, F, true, choice);
  detail::make_outputs(site, E, {{&F, prompts_shape(s)}});
  detail::with_float(E, [&](auto t) {
    using T = decltype(t);
    site.run([&] {
      LSA_NATIVE_BACKEND(device, lsa_forward, s, in<T>(E), in<T>(W_pv), in<T>(W_kq), out<T>(F));
    });
    if (device == Device::cuda)
      detail::check_host_outputs<T>({{"F", &F}}, {detail::host_input<T>(E)});
  });
}

double lsa_loss_and_grad(const ArrayView& E, const ArrayView& y_q, const ArrayView& W_pv,
                         const ArrayView& W_kq, ArrayView& d_W_pv, ArrayView& d_W_kq,
                         ArrayView& y_hat, ArrayView& loss_out, DeviceChoice choice,
                         CallSite& site) {
  const auto [s, device] =
      validate_loss(E, y_q, W_pv, W_kq, d_W_pv, d_W_kq, y_hat, loss_out, choice);
  detail::make_outputs(site, E, {{&d_W_pv, square(s)}, {&d_W_kq, square(s)}, {&y_hat, {s.batch}}});
  return detail::with_float(E, [&](auto t) {
    using T = decltype(t);
    double loss = std::numeric_limits<double>::quiet_NaN();
    site.run([&] {
#if LSA_NATIVE_HAVE_CUDA
      if (loss_out.present && detail::use_cuda(device)) {  // written where it is: no wait on a GPU
        cuda::lsa_loss_and_grad_into(s, in<T>(E), in<T>(y_q), in<T>(W_pv), in<T>(W_kq),
                                     out<T>(d_W_pv), out<T>(d_W_kq), out<T>(y_hat),
                                     out<double>(loss_out));
        if (!loss_out.on_cuda()) loss = *loss_out.as<double>();
        return;
      }
#endif
      loss = LSA_NATIVE_BACKEND(device, lsa_loss_and_grad, s, in<T>(E), in<T>(y_q), in<T>(W_pv),
                                in<T>(W_kq), out<T>(d_W_pv), out<T>(d_W_kq), out<T>(y_hat));
      detail::store_loss(loss_out, loss);
    });
    if (device == Device::cuda && !E.on_cuda()) {
      const auto inputs = {detail::host_input<T>(E), detail::host_input<T>(y_q)};
      detail::check_output<T>(std::isfinite(loss), "loss", inputs);
      detail::check_host_outputs<T>({{"dW_pv", &d_W_pv}, {"dW_kq", &d_W_kq}}, inputs);
    }
    return loss;
  });
}

double lsa_loss_and_grad(const ArrayView& E, const ArrayView& y_q, const ArrayView& W_pv,
                         const ArrayView& W_kq, ArrayView& d_W_pv, ArrayView& d_W_kq,
                         ArrayView& y_hat, DeviceChoice choice, CallSite& site) {
  ArrayView no_loss;
  no_loss.name = "loss";
  return lsa_loss_and_grad(E, y_q, W_pv, W_kq, d_W_pv, d_W_kq, y_hat, no_loss, choice, site);
}

namespace {
// lsa_vjp and lsa_predict_vjp on views: `full` picks the upstream d_F [B, d+1, N+1] or d_y [B].
template <bool full>
void vjp_views(const ArrayView& E, const ArrayView& W_pv, const ArrayView& W_kq,
               const ArrayView& upstream, ArrayView& d_W_pv, ArrayView& d_W_kq, ArrayView& d_E,
               DeviceChoice choice, CallSite& site) {
  const auto [s, device] = validate_vjp(E, W_pv, W_kq, upstream, full, choice);
  detail::make_outputs(site, E, {{&d_W_pv, square(s)}, {&d_W_kq, square(s)}, {&d_E, prompts_shape(s)}});
  detail::with_float(E, [&](auto t) {
    using T = decltype(t);
    site.run([&] {
      if constexpr (full)
        LSA_NATIVE_BACKEND(device, lsa_vjp, s, in<T>(E), in<T>(W_pv), in<T>(W_kq), in<T>(upstream),
                           out<T>(d_W_pv), out<T>(d_W_kq), out<T>(d_E));
      else
        LSA_NATIVE_BACKEND(device, lsa_predict_vjp, s, in<T>(E), in<T>(W_pv), in<T>(W_kq),
                           in<T>(upstream), out<T>(d_W_pv), out<T>(d_W_kq), out<T>(d_E));
    });
    if (device == Device::cuda)
      detail::check_host_outputs<T>({{"dW_pv", &d_W_pv}, {"dW_kq", &d_W_kq}, {"dE", &d_E}},
                                    {detail::host_input<T>(E), detail::host_input<T>(upstream)});
  });
}
}  // namespace

void lsa_vjp(const ArrayView& E, const ArrayView& W_pv, const ArrayView& W_kq, const ArrayView& d_F,
             ArrayView& d_W_pv, ArrayView& d_W_kq, ArrayView& d_E, DeviceChoice choice,
             CallSite& site) {
  vjp_views<true>(E, W_pv, W_kq, d_F, d_W_pv, d_W_kq, d_E, choice, site);
}

void lsa_predict_vjp(const ArrayView& E, const ArrayView& W_pv, const ArrayView& W_kq,
                     const ArrayView& d_y, ArrayView& d_W_pv, ArrayView& d_W_kq, ArrayView& d_E,
                     DeviceChoice choice, CallSite& site) {
  vjp_views<false>(E, W_pv, W_kq, d_y, d_W_pv, d_W_kq, d_E, choice, site);
}
#undef LSA_NATIVE_BACKEND

// The public functions: every entry point of the list, for float and double (lsa.hpp).
#define LSA_NATIVE_LSA_INSTANTIATE(R, name, params) template R name(LSA_NATIVE_UNPAREN params, Device);
LSA_NATIVE_LSA_API(LSA_NATIVE_LSA_INSTANTIATE, float)
LSA_NATIVE_LSA_API(LSA_NATIVE_LSA_INSTANTIATE, double)
#undef LSA_NATIVE_LSA_INSTANTIATE


}  // namespace lsa_native
