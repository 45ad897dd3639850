// The multi-head LSA dispatcher (multihead.hpp): every entry point checks its arguments once,
// here (the view entry points: one validate() each, with the operand rules of operands.hpp);
// H = 1 runs the one-head LSA backends (any device: bitwise the one-head model), H >= 2 the CPU
// kernels (cpu/multihead_cpu.cpp).
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "cpu/lsa_cpu.hpp"
#include "cpu/multihead_cpu.hpp"
#include "dispatch.hpp"
#include "lsa_native/lsa.hpp"
#include "lsa_native/multihead.hpp"
#include "operands.hpp"
#if LSA_NATIVE_HAVE_CUDA
#include "cuda/lsa_cuda.hpp"
#endif

namespace lsa_native {

void validate_heads(const LsaShape& s, index_t heads) {
  validate(s);
  detail::require(heads >= 1, "W_pv: expected at least one head (H >= 1), got H = " +
                                  std::to_string(heads));
  const index_t n2 = (s.dim + 1) * (s.dim + 1);
  detail::require(heads <= std::numeric_limits<index_t>::max() / (2 * n2),
                  "W_pv: H*(d+1)^2 overflows a 64-bit index");
}

namespace {
// The H >= 2 kernels run on the CPU only.
constexpr const char* kNoMultiHeadCuda =
    "the multi-head model (H >= 2) has no CUDA kernels yet";
void require_cpu(Device device) {
  detail::require(device == Device::cpu,
                  std::string("device='cuda': ") + kNoMultiHeadCuda + "; use device='cpu'");
}
}  // namespace
using detail::require_pointer;

template <class T>
void multihead_lsa_predict(const LsaShape& shape, index_t heads, const T* E, const T* W_pv,
                           const T* W_kq, T* y_hat, Device device) {
  validate_heads(shape, heads);
  if (heads == 1) return lsa_predict(shape, E, W_pv, W_kq, y_hat, device);
  require_cpu(device);
  require_pointer(E, "E");
  require_pointer(W_pv, "W_pv");
  require_pointer(W_kq, "W_kq");
  require_pointer(y_hat, "y_hat");
  cpu::multihead_lsa_predict(shape, heads, E, W_pv, W_kq, y_hat);
}

template <class T>
double multihead_lsa_loss_and_grad(const LsaShape& shape, index_t heads, const T* E, const T* y_q,
                                   const T* W_pv, const T* W_kq, T* d_W_pv, T* d_W_kq, T* y_hat,
                                   Device device) {
  validate_heads(shape, heads);
  if (heads == 1) return lsa_loss_and_grad(shape, E, y_q, W_pv, W_kq, d_W_pv, d_W_kq, y_hat, device);
  require_cpu(device);
  require_pointer(E, "E");
  require_pointer(y_q, "y_q");
  require_pointer(W_pv, "W_pv");
  require_pointer(W_kq, "W_kq");
  require_pointer(d_W_pv, "d_W_pv");
  require_pointer(d_W_kq, "d_W_kq");
  return cpu::multihead_lsa_loss_and_grad(shape, heads, E, y_q, W_pv, W_kq, d_W_pv, d_W_kq, y_hat);
}

template <class T>
void multihead_lsa_forward(const LsaShape& shape, index_t heads, const T* E, const T* W_pv,
                           const T* W_kq, T* F, Device device) {
  validate_heads(shape, heads);
  if (heads == 1) return lsa_forward(shape, E, W_pv, W_kq, F, device);
  require_cpu(device);
  require_pointer(E, "E");
  require_pointer(W_pv, "W_pv");
  require_pointer(W_kq, "W_kq");
  require_pointer(F, "F");
  cpu::multihead_lsa_forward(shape, heads, E, W_pv, W_kq, F);
}

template <class T>
void multihead_lsa_vjp(const LsaShape& shape, index_t heads, const T* E, const T* W_pv,
                       const T* W_kq, const T* d_F, T* d_W_pv, T* d_W_kq, T* d_E, Device device) {
  validate_heads(shape, heads);
  if (heads == 1) return lsa_vjp(shape, E, W_pv, W_kq, d_F, d_W_pv, d_W_kq, d_E, device);
  require_cpu(device);
  require_pointer(E, "E");
  require_pointer(W_pv, "W_pv");
  require_pointer(W_kq, "W_kq");
  require_pointer(d_F, "d_F");
  require_pointer(d_W_pv, "d_W_pv");
  require_pointer(d_W_kq, "d_W_kq");
  cpu::multihead_lsa_vjp(shape, heads, E, W_pv, W_kq, d_F, d_W_pv, d_W_kq, d_E);
}

template <class T>
void multihead_lsa_predict_vjp(const LsaShape& shape, index_t heads, const T* E, const T* W_pv,
                               const T* W_kq, const T* d_y, T* d_W_pv, T* d_W_kq, T* d_E,
                               Device device) {
  validate_heads(shape, heads);
  if (heads == 1) return lsa_predict_vjp(shape, E, W_pv, W_kq, d_y, d_W_pv, d_W_kq, d_E, device);
  require_cpu(device);
  require_pointer(E, "E");
  require_pointer(W_pv, "W_pv");
  require_pointer(W_kq, "W_kq");
  require_pointer(d_y, "d_y");
  require_pointer(d_W_pv, "d_W_pv");
  require_pointer(d_W_kq, "d_W_kq");
  cpu::multihead_lsa_predict_vjp(shape, heads, E, W_pv, W_kq, d_y, d_W_pv, d_W_kq, d_E);
}

// ---- the view entry points (multihead.hpp): validate() once, then the backend the views ask for

namespace {
using detail::in;
using detail::out;
using detail::require_input;
using detail::require_output;

// A multi-head call after validate(): the prompts' shape, the heads and the device it runs on.
struct MultiHeadCall {
  LsaShape shape;
  index_t heads;
  Device device;
  std::vector<index_t> prompts() const { return {shape.batch, shape.dim + 1, shape.context + 1}; }
  std::vector<index_t> parameters() const { return {heads, shape.dim + 1, shape.dim + 1}; }
};

// The operands every entry point reads: E, W_pv [H, d+1, d+1] (its first axis is H), W_kq of
// W_pv's shape, in E's dtype.
MultiHeadCall validate_parameters(const ArrayView& E, const ArrayView& W_pv,
                                  const ArrayView& W_kq) {
  MultiHeadCall call{detail::prompt_shape(E), 1, Device::cpu};
  const index_t n = call.shape.dim + 1;
  if (W_pv.present && W_pv.shape.size() != 3)
    throw Error("W_pv: expected shape (H, " + std::to_string(n) + ", " + std::to_string(n) +
                ") (H heads of [d+1, d+1]), got " + detail::shape_string(W_pv.shape));
  if (W_pv.present) call.heads = W_pv.shape[0];
  validate_heads(call.shape, call.heads);
  require_input(W_pv, call.parameters(), E);
  require_input(W_kq, call.parameters(), E);
  return call;
}

// The device of the call (detail::choose_device); H >= 2 runs on the CPU only: an error naming the
// CUDA operand, or device='cuda'.
Device multihead_device(const MultiHeadCall& call, DeviceChoice choice,
                     std::initializer_list<const ArrayView*> views) {
  if (call.heads >= 2) {
    for (const ArrayView* v : views)
      if (v->present && v->on_cuda())
        throw Error(std::string(v->name) + " is a CUDA array, but " + kNoMultiHeadCuda +
                    " (H = " + std::to_string(call.heads) +
                    "); copy the arrays to the host (e.g. tensor.cpu().numpy(), cupy.asnumpy)");
    require_cpu(choice == DeviceChoice::cuda ? Device::cuda : Device::cpu);
  }
  return detail::choose_device(choice, views);
}

// validate() of predict and forward: E, W_pv, W_kq and the output `out` (y_hat [B] or F).
MultiHeadCall validate_forward(const ArrayView& E, const ArrayView& W_pv, const ArrayView& W_kq,
                               const ArrayView& out, bool full, DeviceChoice choice) {
  MultiHeadCall call = validate_parameters(E, W_pv, W_kq);
  require_output(out, full ? call.prompts() : std::vector<index_t>{call.shape.batch}, E,
                 {&E, &W_pv, &W_kq});
  call.device = multihead_device(call, choice, {&E, &W_pv, &W_kq, &out});
  return call;
}

// validate() of loss_and_grad: E, y_q [B], W_pv, W_kq (the outputs are made by the call).
MultiHeadCall validate_loss(const ArrayView& E, const ArrayView& y_q, const ArrayView& W_pv,
                            const ArrayView& W_kq, DeviceChoice choice) {
  MultiHeadCall call = validate_parameters(E, W_pv, W_kq);
  require_input(y_q, {call.shape.batch}, E);
  call.device = multihead_device(call, choice, {&E, &y_q, &W_pv, &W_kq});
  return call;
}

// validate() of the VJPs: E, W_pv, W_kq and the upstream d_F [B, d+1, N+1] or d_y [B] (may hold
// NaN/inf: a non-finite result names it).
MultiHeadCall validate_vjp(const ArrayView& E, const ArrayView& W_pv, const ArrayView& W_kq,
                           const ArrayView& upstream, bool full, DeviceChoice choice) {
  MultiHeadCall call = validate_parameters(E, W_pv, W_kq);
  require_input(upstream, full ? call.prompts() : std::vector<index_t>{call.shape.batch}, E,
                detail::Finite::any);
  call.device = multihead_device(call, choice, {&E, &W_pv, &W_kq, &upstream});
  return call;
}

// ŷ or F on views: `full` picks forward (F [B, d+1, N+1]) or predict (ŷ [B]).
template <bool full>
void forward_views(const ArrayView& E, const ArrayView& W_pv, const ArrayView& W_kq,
                   ArrayView& result, DeviceChoice choice, CallSite& site) {
  const MultiHeadCall c = validate_forward(E, W_pv, W_kq, result, full, choice);
  const std::vector<index_t> shape = full ? c.prompts() : std::vector<index_t>{c.shape.batch};
  detail::make_outputs(site, E, {{&result, shape}});
  detail::with_float(E, [&](auto t) {
    using T = decltype(t);
    site.run([&] {
      const LsaShape& s = c.shape;
      if constexpr (full) {
        if (c.heads == 1)
          LSA_NATIVE_BACKEND(c.device, lsa_forward, s, in<T>(E), in<T>(W_pv), in<T>(W_kq),
                             out<T>(result));
        else
          cpu::multihead_lsa_forward(s, c.heads, in<T>(E), in<T>(W_pv), in<T>(W_kq), out<T>(result));
      } else {
        if (c.heads == 1)
          LSA_NATIVE_BACKEND(c.device, lsa_predict, s, in<T>(E), in<T>(W_pv), in<T>(W_kq),
                             out<T>(result));
        else
          cpu::multihead_lsa_predict(s, c.heads, in<T>(E), in<T>(W_pv), in<T>(W_kq), out<T>(result));
      }
    });
    if (c.device == Device::cuda)
      detail::check_host_outputs<T>({{full ? "F" : "y_hat", &result}}, {detail::host_input<T>(E)});
  });
}

// The VJPs on views: `full` picks the upstream d_F [B, d+1, N+1] or d_y [B].
template <bool full>
void vjp_views(const ArrayView& E, const ArrayView& W_pv, const ArrayView& W_kq,
               const ArrayView& upstream, ArrayView& d_W_pv, ArrayView& d_W_kq, ArrayView& d_E,
               DeviceChoice choice, CallSite& site) {
  const MultiHeadCall c = validate_vjp(E, W_pv, W_kq, upstream, full, choice);
  detail::make_outputs(site, E, {{&d_W_pv, c.parameters()}, {&d_W_kq, c.parameters()},
                                 {&d_E, c.prompts()}});
  detail::with_float(E, [&](auto t) {
    using T = decltype(t);
    site.run([&] {
      const LsaShape& s = c.shape;
      if constexpr (full) {
        if (c.heads == 1)
          LSA_NATIVE_BACKEND(c.device, lsa_vjp, s, in<T>(E), in<T>(W_pv), in<T>(W_kq),
                             in<T>(upstream), out<T>(d_W_pv), out<T>(d_W_kq), out<T>(d_E));
        else
          cpu::multihead_lsa_vjp(s, c.heads, in<T>(E), in<T>(W_pv), in<T>(W_kq), in<T>(upstream),
                                 out<T>(d_W_pv), out<T>(d_W_kq), out<T>(d_E));
      } else {
        if (c.heads == 1)
          LSA_NATIVE_BACKEND(c.device, lsa_predict_vjp, s, in<T>(E), in<T>(W_pv), in<T>(W_kq),
                             in<T>(upstream), out<T>(d_W_pv), out<T>(d_W_kq), out<T>(d_E));
        else
          cpu::multihead_lsa_predict_vjp(s, c.heads, in<T>(E), in<T>(W_pv), in<T>(W_kq),
                                         in<T>(upstream), out<T>(d_W_pv), out<T>(d_W_kq),
                                         out<T>(d_E));
      }
    });
    if (c.device == Device::cuda)
      detail::check_host_outputs<T>({{"dW_pv", &d_W_pv}, {"dW_kq", &d_W_kq}, {"dE", &d_E}},
                                    {detail::host_input<T>(E), detail::host_input<T>(upstream)});
  });
}
}  // namespace

void multihead_lsa_predict(const ArrayView& E, const ArrayView& W_pv, const ArrayView& W_kq,
                           ArrayView& y_hat, DeviceChoice choice, CallSite& site) {
  forward_views<false>(E, W_pv, W_kq, y_hat, choice, site);
}

void multihead_lsa_forward(const ArrayView& E, const ArrayView& W_pv, const ArrayView& W_kq,
                           ArrayView& F, DeviceChoice choice, CallSite& site) {
  forward_views<true>(E, W_pv, W_kq, F, choice, site);
}

double multihead_lsa_loss_and_grad(const ArrayView& E, const ArrayView& y_q, const ArrayView& W_pv,
                                   const ArrayView& W_kq, ArrayView& d_W_pv, ArrayView& d_W_kq,
                                   ArrayView& y_hat, DeviceChoice choice, CallSite& site) {
  const MultiHeadCall c = validate_loss(E, y_q, W_pv, W_kq, choice);
  detail::make_outputs(site, E, {{&d_W_pv, c.parameters()}, {&d_W_kq, c.parameters()},
                                 {&y_hat, {c.shape.batch}}});
  return detail::with_float(E, [&](auto t) {
    using T = decltype(t);
    double loss = 0;
    site.run([&] {
      if (c.heads == 1)
        loss = LSA_NATIVE_BACKEND(c.device, lsa_loss_and_grad, c.shape, in<T>(E), in<T>(y_q),
                                  in<T>(W_pv), in<T>(W_kq), out<T>(d_W_pv), out<T>(d_W_kq),
                                  out<T>(y_hat));
      else
        loss = cpu::multihead_lsa_loss_and_grad(c.shape, c.heads, in<T>(E), in<T>(y_q),
                                                in<T>(W_pv), in<T>(W_kq), out<T>(d_W_pv),
                                                out<T>(d_W_kq), out<T>(y_hat));
    });
    if (c.device == Device::cuda && !E.on_cuda()) {
      const auto inputs = {detail::host_input<T>(E), detail::host_input<T>(y_q)};
      detail::check_output<T>(std::isfinite(loss), "loss", inputs);
      detail::check_host_outputs<T>({{"dW_pv", &d_W_pv}, {"dW_kq", &d_W_kq}}, inputs);
    }
    return loss;
  });
}

void multihead_lsa_vjp(const ArrayView& E, const ArrayView& W_pv, const ArrayView& W_kq,
                       const ArrayView& d_F, ArrayView& d_W_pv, ArrayView& d_W_kq, ArrayView& d_E,
                       DeviceChoice choice, CallSite& site) {
  vjp_views<true>(E, W_pv, W_kq, d_F, d_W_pv, d_W_kq, d_E, choice, site);
}

void multihead_lsa_predict_vjp(const ArrayView& E, const ArrayView& W_pv, const ArrayView& W_kq,
                               const ArrayView& d_y, ArrayView& d_W_pv, ArrayView& d_W_kq,
                               ArrayView& d_E, DeviceChoice choice, CallSite& site) {
  vjp_views<false>(E, W_pv, W_kq, d_y, d_W_pv, d_W_kq, d_E, choice, site);
}

#define LSA_NATIVE_MULTIHEAD_INSTANTIATE(R, name, params) \
  template R name(LSA_NATIVE_UNPAREN params, Device);
LSA_NATIVE_MULTIHEAD_API(LSA_NATIVE_MULTIHEAD_INSTANTIATE, float)
LSA_NATIVE_MULTIHEAD_API(LSA_NATIVE_MULTIHEAD_INSTANTIATE, double)
#undef LSA_NATIVE_MULTIHEAD_INSTANTIATE

}  // namespace lsa_native
