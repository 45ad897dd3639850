// The multi-head LSA dispatcher (multihead.hpp): every entry point checks its arguments once,
// here (the view entry points: one validate() each, with the operand rules of operands.hpp);
// H = 1 runs the one-head LSA backends (any device: bitwise the one-head model), H >= 2 the
// multi-head ones (cpu/multihead_cpu.cpp, cuda/multihead_cuda.cu).
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "common/linear_prompts.hpp"
#include "cpu/lsa_cpu.hpp"
#include "cpu/multihead_cpu.hpp"
#include "dispatch.hpp"
#include "lsa_native/lsa.hpp"
#include "lsa_native/multihead.hpp"
#include "lsa_native/sampling.hpp"
#include "operands.hpp"
#if LSA_NATIVE_HAVE_CUDA
#include "cuda/lsa_cuda.hpp"
#include "cuda/multihead_cuda.hpp"
#endif

// The backend call once the device is known (`gpu`: detail::use_cuda's answer, asked once per call):
// cuda::CALL on a usable GPU, else cpu::CALL.
#if LSA_NATIVE_HAVE_CUDA
#define LSA_NATIVE_MH_BACKEND(gpu, CALL, ...) ((gpu) ? cuda::CALL(__VA_ARGS__) : cpu::CALL(__VA_ARGS__))
#else
#define LSA_NATIVE_MH_BACKEND(gpu, CALL, ...) ((void)(gpu), cpu::CALL(__VA_ARGS__))
#endif
// H = 1: the one-head LSA entry point (bitwise the one-head model); H >= 2: the multi-head one.
#define LSA_NATIVE_MH_HEADS(gpu, heads, LSA_CALL, MH_CALL, shape, ...)                       \
  ((heads) == 1 ? LSA_NATIVE_MH_BACKEND(gpu, LSA_CALL, shape, __VA_ARGS__)                   \
                : LSA_NATIVE_MH_BACKEND(gpu, MH_CALL, shape, heads, __VA_ARGS__))

namespace lsa_native {

namespace {
// H >= 1 and H·(d+1)² in index_t, for a shape already validated (W_pv's first axis is H).
void check_heads(const LsaShape& s, index_t heads) {
  detail::require(heads >= 1, "W_pv: expected at least one head (H >= 1), got H = " +
                                  std::to_string(heads));
  const index_t n2 = (s.dim + 1) * (s.dim + 1);
  detail::require(heads <= std::numeric_limits<index_t>::max() / (2 * n2),
                  "W_pv: H*(d+1)^2 overflows a 64-bit index");
}

// The typed entry points' checks: shape and heads once, every pointer not null; returns whether
// the call runs on the GPU (use_cuda, once).
bool validate_typed(const LsaShape& shape, index_t heads, Device device,
                    std::initializer_list<std::pair<const void*, const char*>> pointers) {
  validate_heads(shape, heads);
  for (const auto& [p, name] : pointers) detail::require_pointer(p, name);
  return detail::use_cuda(device);
}
}  // namespace

void validate_heads(const LsaShape& s, index_t heads) {
  validate(s);
  check_heads(s, heads);
}

template <class T>
void multihead_lsa_predict(const LsaShape& shape, index_t heads, const T* E, const T* W_pv,
                           const T* W_kq, T* y_hat, Device device) {
  const bool gpu = validate_typed(shape, heads, device,
                                  {{E, "E"}, {W_pv, "W_pv"}, {W_kq, "W_kq"}, {y_hat, "y_hat"}});
  LSA_NATIVE_MH_HEADS(gpu, heads, lsa_predict, multihead_lsa_predict, shape, E, W_pv, W_kq, y_hat);
}

template <class T>
double multihead_lsa_loss_and_grad(const LsaShape& shape, index_t heads, const T* E, const T* y_q,
                                   const T* W_pv, const T* W_kq, T* d_W_pv, T* d_W_kq, T* y_hat,
                                   Device device) {
  const bool gpu = validate_typed(shape, heads, device,
                                  {{E, "E"}, {y_q, "y_q"}, {W_pv, "W_pv"}, {W_kq, "W_kq"},
                                   {d_W_pv, "d_W_pv"}, {d_W_kq, "d_W_kq"}});
  return LSA_NATIVE_MH_HEADS(gpu, heads, lsa_loss_and_grad, multihead_lsa_loss_and_grad, shape, E,
                             y_q, W_pv, W_kq, d_W_pv, d_W_kq, y_hat);
}

template <class T>
void multihead_lsa_forward(const LsaShape& shape, index_t heads, const T* E, const T* W_pv,
                           const T* W_kq, T* F, Device device) {
  const bool gpu = validate_typed(shape, heads, device,
                                  {{E, "E"}, {W_pv, "W_pv"}, {W_kq, "W_kq"}, {F, "F"}});
  LSA_NATIVE_MH_HEADS(gpu, heads, lsa_forward, multihead_lsa_forward, shape, E, W_pv, W_kq, F);
}

template <class T>
void multihead_lsa_vjp(const LsaShape& shape, index_t heads, const T* E, const T* W_pv,
                       const T* W_kq, const T* d_F, T* d_W_pv, T* d_W_kq, T* d_E, Device device) {
  const bool gpu = validate_typed(shape, heads, device,
                                  {{E, "E"}, {W_pv, "W_pv"}, {W_kq, "W_kq"}, {d_F, "d_F"},
                                   {d_W_pv, "d_W_pv"}, {d_W_kq, "d_W_kq"}});
  LSA_NATIVE_MH_HEADS(gpu, heads, lsa_vjp, multihead_lsa_vjp, shape, E, W_pv, W_kq, d_F, d_W_pv,
                      d_W_kq, d_E);
}

template <class T>
void multihead_lsa_predict_vjp(const LsaShape& shape, index_t heads, const T* E, const T* W_pv,
                               const T* W_kq, const T* d_y, T* d_W_pv, T* d_W_kq, T* d_E,
                               Device device) {
  const bool gpu = validate_typed(shape, heads, device,
                                  {{E, "E"}, {W_pv, "W_pv"}, {W_kq, "W_kq"}, {d_y, "d_y"},
                                   {d_W_pv, "d_W_pv"}, {d_W_kq, "d_W_kq"}});
  LSA_NATIVE_MH_HEADS(gpu, heads, lsa_predict_vjp, multihead_lsa_predict_vjp, shape, E, W_pv, W_kq,
                      d_y, d_W_pv, d_W_kq, d_E);
}

template <class T>
double linear_prompts_multihead_loss_and_grad(const LinearPromptSpec& spec, index_t batch,
                                              std::uint32_t step, FusedMethod method, index_t heads,
                                              const T* W_pv, const T* W_kq, T* d_W_pv, T* d_W_kq,
                                              Device device, double* loss) {
  detail::validate_fused_step(spec, batch, method);
  check_heads(LsaShape{batch, spec.dim, spec.context}, heads);
  if (heads == 1)  // the one-head fused step (bitwise)
    return linear_prompts_lsa_loss_and_grad(spec, batch, step, method, W_pv, W_kq, d_W_pv, d_W_kq,
                                            device, loss);
  for (const auto& [p, name] : {std::pair<const void*, const char*>{W_pv, "W_pv"}, {W_kq, "W_kq"},
                                {d_W_pv, "d_W_pv"}, {d_W_kq, "d_W_kq"}})
    detail::require_pointer(p, name);
  const linear::Plan<T> P(spec, step);  // validates the spec
#if LSA_NATIVE_HAVE_CUDA
  if (detail::use_cuda(device))  // the loss written where it is: no wait on a GPU
    return cuda::linear_prompts_multihead_loss_and_grad(P, batch, method, heads, W_pv, W_kq, d_W_pv,
                                                        d_W_kq, loss);
#else
  detail::use_cuda(device);  // Device::cuda: the error naming the missing CUDA kernels
#endif
  const double L = cpu::linear_prompts_multihead_loss_and_grad(P, batch, method, heads, W_pv, W_kq,
                                                               d_W_pv, d_W_kq);
  if (loss == nullptr) return L;
  *loss = L;
  return std::numeric_limits<double>::quiet_NaN();
}

namespace {
// The separate parametrization's shapes: H >= 1, rows >= 2, 1 <= rank <= rows, H·rows² in index_t.
void check_separate(index_t heads, index_t rank, index_t rows,
                    std::initializer_list<std::pair<const void*, const char*>> pointers) {
  detail::require(heads >= 1, "W_k: expected at least one head (H >= 1), got H = " +
                                  std::to_string(heads));
  detail::require(rows >= 2, "W_k: expected d+1 >= 2 columns, got " + std::to_string(rows));
  detail::require(rank >= 1 && rank <= rows, "W_k: rank r = " + std::to_string(rank) +
                                                 " out of range, expected 1 <= r <= d+1 = " +
                                                 std::to_string(rows));
  detail::require(heads <= std::numeric_limits<index_t>::max() / (2 * rows * rows),
                  "W_k: H*(d+1)^2 overflows a 64-bit index");
  for (const auto& [p, name] : pointers) detail::require_pointer(p, name);
}
}  // namespace

template <class T>
void multihead_merge_kq(index_t heads, index_t rank, index_t rows, const T* W_k, const T* W_q,
                        T* W_kq, Device device) {
  check_separate(heads, rank, rows, {{W_k, "W_k"}, {W_q, "W_q"}, {W_kq, "W_kq"}});
  LSA_NATIVE_MH_BACKEND(detail::use_cuda(device), multihead_merge_kq<T>, heads, rank, rows, W_k,
                        W_q, W_kq);
}

template <class T>
void multihead_chain_kq(index_t heads, index_t rank, index_t rows, const T* W_k, const T* W_q,
                        const T* d_W_kq, T* d_W_k, T* d_W_q, Device device) {
  check_separate(heads, rank, rows, {{W_k, "W_k"}, {W_q, "W_q"}, {d_W_kq, "d_W_kq"},
                                     {d_W_k, "d_W_k"}, {d_W_q, "d_W_q"}});
  LSA_NATIVE_MH_BACKEND(detail::use_cuda(device), multihead_chain_kq<T>, heads, rank, rows, W_k,
                        W_q, d_W_kq, d_W_k, d_W_q);
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
  bool gpu;  // detail::use_cuda(device): the backend (false also for CUDA emulated on the CPU)
  std::vector<index_t> prompts() const { return {shape.batch, shape.dim + 1, shape.context + 1}; }
  std::vector<index_t> parameters() const { return {heads, shape.dim + 1, shape.dim + 1}; }
};

// The operands every entry point reads: E, W_pv [H, d+1, d+1] (its first axis is H), W_kq of
// W_pv's shape, in E's dtype.
MultiHeadCall validate_parameters(const ArrayView& E, const ArrayView& W_pv,
                                  const ArrayView& W_kq) {
  MultiHeadCall call{detail::prompt_shape(E), 1, Device::cpu, false};
  const index_t n = call.shape.dim + 1;
  if (W_pv.present && W_pv.shape.size() != 3)
    throw Error("W_pv: expected shape (H, " + std::to_string(n) + ", " + std::to_string(n) +
                ") (H heads of [d+1, d+1]), got " + detail::shape_string(W_pv.shape));
  if (W_pv.present) call.heads = W_pv.shape[0];
  check_heads(call.shape, call.heads);  // the shape: validated by prompt_shape
  require_input(W_pv, call.parameters(), E);
  require_input(W_kq, call.parameters(), E);
  return call;
}

// The device of the call and its backend (detail::choose_device, use_cuda asked once).
void choose_device(MultiHeadCall& call, DeviceChoice choice,
                   std::initializer_list<const ArrayView*> views) {
  call.device = detail::choose_device(choice, views, &call.gpu);
}

// validate() of predict and forward: E, W_pv, W_kq and the output `out` (y_hat [B] or F).
MultiHeadCall validate_forward(const ArrayView& E, const ArrayView& W_pv, const ArrayView& W_kq,
                               const ArrayView& out, bool full, DeviceChoice choice) {
  MultiHeadCall call = validate_parameters(E, W_pv, W_kq);
  require_output(out, full ? call.prompts() : std::vector<index_t>{call.shape.batch}, E,
                 {&E, &W_pv, &W_kq});
  choose_device(call, choice, {&E, &W_pv, &W_kq, &out});
  return call;
}

// validate() of loss_and_grad: E, y_q [B], W_pv, W_kq and the outputs the caller passed (dW_pv,
// dW_kq [H, d+1, d+1], y_hat [B], loss float64 [1]: the LSA entry point's rules, operands.hpp).
MultiHeadCall validate_loss(const ArrayView& E, const ArrayView& y_q, const ArrayView& W_pv,
                            const ArrayView& W_kq, const ArrayView& d_W_pv,
                            const ArrayView& d_W_kq, const ArrayView& y_hat, const ArrayView& loss,
                            DeviceChoice choice) {
  MultiHeadCall call = validate_parameters(E, W_pv, W_kq);
  require_input(y_q, {call.shape.batch}, E);
  detail::require_loss_outputs(d_W_pv, d_W_kq, y_hat, loss, call.parameters(), call.shape.batch, E,
                               {&E, &y_q, &W_pv, &W_kq});
  choose_device(call, choice, {&E, &y_q, &W_pv, &W_kq, &d_W_pv, &d_W_kq, &y_hat, &loss});
  return call;
}

// validate() of the VJPs: E, W_pv, W_kq and the upstream d_F [B, d+1, N+1] or d_y [B] (may hold
// NaN/inf: a non-finite result names it).
MultiHeadCall validate_vjp(const ArrayView& E, const ArrayView& W_pv, const ArrayView& W_kq,
                           const ArrayView& upstream, bool full, DeviceChoice choice) {
  MultiHeadCall call = validate_parameters(E, W_pv, W_kq);
  require_input(upstream, full ? call.prompts() : std::vector<index_t>{call.shape.batch}, E,
                detail::Finite::any);
  choose_device(call, choice, {&E, &W_pv, &W_kq, &upstream});
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
      if constexpr (full)
        LSA_NATIVE_MH_HEADS(c.gpu, c.heads, lsa_forward, multihead_lsa_forward, c.shape, in<T>(E),
                            in<T>(W_pv), in<T>(W_kq), out<T>(result));
      else
        LSA_NATIVE_MH_HEADS(c.gpu, c.heads, lsa_predict, multihead_lsa_predict, c.shape, in<T>(E),
                            in<T>(W_pv), in<T>(W_kq), out<T>(result));
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
      if constexpr (full)
        LSA_NATIVE_MH_HEADS(c.gpu, c.heads, lsa_vjp, multihead_lsa_vjp, c.shape, in<T>(E),
                            in<T>(W_pv), in<T>(W_kq), in<T>(upstream), out<T>(d_W_pv),
                            out<T>(d_W_kq), out<T>(d_E));
      else
        LSA_NATIVE_MH_HEADS(c.gpu, c.heads, lsa_predict_vjp, multihead_lsa_predict_vjp, c.shape,
                            in<T>(E), in<T>(W_pv), in<T>(W_kq), in<T>(upstream), out<T>(d_W_pv),
                            out<T>(d_W_kq), out<T>(d_E));
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
                                   ArrayView& y_hat, ArrayView& loss_out, DeviceChoice choice,
                                   CallSite& site) {
  const MultiHeadCall c =
      validate_loss(E, y_q, W_pv, W_kq, d_W_pv, d_W_kq, y_hat, loss_out, choice);
  detail::make_outputs(site, E, {{&d_W_pv, c.parameters()}, {&d_W_kq, c.parameters()},
                                 {&y_hat, {c.shape.batch}}});
  return detail::with_float(E, [&](auto t) {
    using T = decltype(t);
    double loss = std::numeric_limits<double>::quiet_NaN();
    site.run([&] {
#if LSA_NATIVE_HAVE_CUDA
      if (loss_out.present && c.gpu) {  // written where it is: no wait on a GPU
        if (c.heads == 1)
          cuda::lsa_loss_and_grad_into(c.shape, in<T>(E), in<T>(y_q), in<T>(W_pv), in<T>(W_kq),
                                       out<T>(d_W_pv), out<T>(d_W_kq), out<T>(y_hat),
                                       out<double>(loss_out));
        else
          cuda::multihead_lsa_loss_and_grad_into(c.shape, c.heads, in<T>(E), in<T>(y_q),
                                                 in<T>(W_pv), in<T>(W_kq), out<T>(d_W_pv),
                                                 out<T>(d_W_kq), out<T>(y_hat),
                                                 out<double>(loss_out));
        if (!loss_out.on_cuda()) loss = *loss_out.as<double>();
        return;
      }
#endif
      loss = LSA_NATIVE_MH_HEADS(c.gpu, c.heads, lsa_loss_and_grad, multihead_lsa_loss_and_grad,
                                 c.shape, in<T>(E), in<T>(y_q), in<T>(W_pv), in<T>(W_kq),
                                 out<T>(d_W_pv), out<T>(d_W_kq), out<T>(y_hat));
      detail::store_loss(loss_out, loss);
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
#define LSA_NATIVE_INSTANTIATE_FUSED(T)                                                            \
  template double linear_prompts_multihead_loss_and_grad<T>(const LinearPromptSpec&, index_t,     \
                                                            std::uint32_t, FusedMethod, index_t,  \
                                                            const T*, const T*, T*, T*, Device,   \
                                                            double*);
LSA_NATIVE_INSTANTIATE_FUSED(float)
LSA_NATIVE_INSTANTIATE_FUSED(double)
#undef LSA_NATIVE_INSTANTIATE_FUSED

}  // namespace lsa_native
