// Public kernel-attention entry points (kernel_attention.hpp): argument checks once, then the
// backend the caller asked for (cpu/kernel_attention_cpu.cpp, cuda/ka_cuda.cu) via dispatch.hpp.
#include <cmath>
#include <limits>
#include <utility>
#include <vector>
#include <string>

#include "common/ka_recipe.hpp"
#include "cpu/kernel_attention_cpu.hpp"
#include "dispatch.hpp"
#include "operands.hpp"
#include "lsa_native/kernel_attention.hpp"
#if LSA_NATIVE_HAVE_CUDA
#include "cuda/ka_cuda.hpp"
#endif

namespace lsa_native {

void validate(const KernelAttentionShape& s) {
  detail::require(s.batch >= 1, "Z0: expected at least one prompt (B >= 1), got B = " +
                                    std::to_string(s.batch));
  detail::require(s.dim >= 1, "Z0: expected d+1 >= 2 rows (d >= 1), got d = " + std::to_string(s.dim));
  detail::require(s.context >= 1,
                  "Z0: expected n+1 >= 2 columns (n >= 1 context tokens plus the query), got n = " +
                      std::to_string(s.context));
  detail::require(s.layers >= 1, "V: expected L >= 1 layers, got L = " + std::to_string(s.layers));
  detail::require(s.heads >= 1, "V: expected H >= 1 heads, got H = " + std::to_string(s.heads));
  // Per-prompt extents are int in the per-prompt code (recipe::KaContext); whole prompts use
  // 64-bit offsets.
  const index_t max_extent = index_t(1) << 20;
  detail::require(s.dim <= max_extent && s.context <= max_extent && s.layers <= max_extent &&
                      s.heads <= max_extent && s.layers * s.heads <= max_extent,
                  "kernel attention: d, n and L·H must be <= 2^20");
  detail::require((s.dim + 1) * (s.context + 1) <= std::numeric_limits<index_t>::max() / s.batch,
                  "Z0: B*(d+1)*(n+1) overflows a 64-bit index");
}

std::vector<Activation> activations_per_head(const ActivationChoice& choice, index_t heads) {
  for (Activation a : choice.activations) activation_from_code(static_cast<int>(a), choice.name);
  const auto given = static_cast<index_t>(choice.activations.size());
  if (choice.shared && given == 1) return std::vector<Activation>(heads, choice.activations[0]);
  detail::require(!choice.shared && given == heads,
                  std::string(choice.name) + ": expected one name or " + std::to_string(heads) +
                      " names (one per head), got " + std::to_string(given));
  return choice.activations;
}

namespace {

// Shape, pointers and activation codes, checked once for every entry point.
template <class T>
void check_arguments(const KernelAttentionShape& s, const T* Z0, const T* V, const T* Bq,
                     const T* Ck, const Activation* acts) {
  validate(s);
  detail::require(Z0 && V && Bq && Ck && acts, "Z0, V, B, C and activations must not be null");
  for (index_t h = 0; h < s.heads; ++h) activation_from_code(static_cast<int>(acts[h]));
}

}  // namespace

template <class T>
index_t kernel_attention_context_size(const KernelAttentionShape& sh) {
  validate(sh);
  return recipe::context_layout<T>(sh).size();
}

template <class T>
void kernel_attention_forward(const KernelAttentionShape& sh, const T* Z0, const T* V, const T* Bq,
                              const T* Ck, const Activation* acts, T* Z_out, T* predictions,
                              T* context, PredictionOutput prediction_output, Device device) {
  check_arguments(sh, Z0, V, Bq, Ck, acts);
  detail::require(prediction_output == PredictionOutput::tf ||
                      prediction_output == PredictionOutput::y_hat ||
                      prediction_output == PredictionOutput::y_hat_final,
                  "prediction_output: expected PredictionOutput::tf, y_hat or y_hat_final");
  LSA_NATIVE_BACKEND(device, kernel_attention_forward, sh, Z0, V, Bq, Ck, acts, Z_out, predictions,
                     context, prediction_output);
}

template <class T>
void kernel_attention_vjp(const KernelAttentionShape& sh, const T* Z0, const T* V, const T* Bq,
                          const T* Ck, const Activation* acts, const T* d_Z_out, T* d_V, T* d_B,
                          T* d_C, T* d_Z0, const T* context, Device device) {
  check_arguments(sh, Z0, V, Bq, Ck, acts);
  detail::require(d_Z_out && d_V && d_B && d_C, "d_Z_out, d_V, d_B and d_C must not be null");
  LSA_NATIVE_BACKEND(device, kernel_attention_vjp, sh, Z0, V, Bq, Ck, acts, d_Z_out, d_V, d_B, d_C,
                     d_Z0, context);
}

template <class T>
double kernel_attention_loss_and_grad(const KernelAttentionShape& sh, const T* Z0, const T* y_q,
                                      const T* V, const T* Bq, const T* Ck, const Activation* acts,
                                      T* d_V, T* d_B, T* d_C, T* d_Z0, T* predictions,
                                      Device device) {
  check_arguments(sh, Z0, V, Bq, Ck, acts);
  detail::require(y_q && d_V && d_B && d_C, "y_q, d_V, d_B and d_C must not be null");
  return LSA_NATIVE_BACKEND(device, kernel_attention_loss_and_grad, sh, Z0, y_q, V, Bq, Ck, acts,
                            d_V, d_B, d_C, d_Z0, predictions);
}

template <class T>
void kernel_attention_predict_vjp(const KernelAttentionShape& sh, const T* Z0, const T* V,
                                  const T* Bq, const T* Ck, const Activation* acts, const T* d_y,
                                  T* d_V, T* d_B, T* d_C, T* d_Z0, Device device) {
  check_arguments(sh, Z0, V, Bq, Ck, acts);
  detail::require(d_y && d_V && d_B && d_C, "d_y, d_V, d_B and d_C must not be null");
  LSA_NATIVE_BACKEND(device, kernel_attention_predict_vjp, sh, Z0, V, Bq, Ck, acts, d_y, d_V, d_B,
                     d_C, d_Z0);
}

// ---- the view entry points (array_view.hpp): validate() once, then the backend the views ask for

namespace {
using detail::require_input;
using detail::require_output;
using detail::in;
using detail::out;

// A kernel-attention call after validate(): shape, activations per head, device.
struct KaCall {
  KernelAttentionShape shape;
  std::vector<Activation> activations;
  Device device;
};

std::vector<index_t> prompts_shape(const KernelAttentionShape& s) {
  return {s.batch, s.dim + 1, s.context + 1};
}
std::vector<index_t> value_shape(const KernelAttentionShape& s) {
  return {s.layers, s.heads, s.dim + 1, s.dim + 1};
}
std::vector<index_t> key_shape(const KernelAttentionShape& s) {
  return {s.layers, s.heads, s.dim, s.dim};
}
// [B, L+1], or [B] for ŷ_L alone (kernel_attention.hpp): recipe::prediction_count's values per
// prompt (what the kernels write and a CUDA call stages), the layer axis dropped for ŷ_L alone.
std::vector<index_t> predictions_shape(const KernelAttentionShape& s,
                                       PredictionOutput what = PredictionOutput::tf) {
  const index_t per_prompt = recipe::prediction_count(what, 1, static_cast<int>(s.layers));
  if (what == PredictionOutput::y_hat_final) return {s.batch};
  return {s.batch, per_prompt};
}

// The gradient outputs of the backward entry points (d_V, d_B, d_C, d_Z0): the ones the caller
// passed checked against their shapes, the ones it did not made like Z0.
void require_gradient_outputs(const KernelAttentionShape& s, const ArrayView& Z0,
                              std::initializer_list<const ArrayView*> inputs, const ArrayView& d_V,
                              const ArrayView& d_B, const ArrayView& d_C, const ArrayView& d_Z0) {
  require_output(d_V, value_shape(s), Z0, inputs);
  require_output(d_B, key_shape(s), Z0, inputs);
  require_output(d_C, key_shape(s), Z0, inputs);
  require_output(d_Z0, prompts_shape(s), Z0, inputs);
}
void make_gradient_outputs(CallSite& site, const ArrayView& Z0, const KernelAttentionShape& s,
                           ArrayView& d_V, ArrayView& d_B, ArrayView& d_C, ArrayView& d_Z0) {
  detail::make_outputs(site, Z0,
                       {{&d_V, value_shape(s)},
                        {&d_B, key_shape(s)},
                        {&d_C, key_shape(s)},
                        {&d_Z0, prompts_shape(s)}});
}

// The operands every entry point reads: Z0, V, B, C and the activations.
KernelAttentionShape validate_parameters(const ArrayView& Z0, const ArrayView& V,
                                         const ArrayView& Bq, const ArrayView& Ck) {
  detail::require_prompts(Z0);
  if (V.shape.size() != 4)
    throw Error("V: expected shape [L, H, d+1, d+1], got " + detail::shape_string(V.shape));
  const KernelAttentionShape s{Z0.shape[0], Z0.shape[1] - 1, Z0.shape[2] - 1, V.shape[0],
                               V.shape[1]};
  validate(s);
  require_input(V, value_shape(s), Z0);
  require_input(Bq, key_shape(s), Z0);
  require_input(Ck, key_shape(s), Z0);
  return s;
}


index_t context_size(const KernelAttentionShape& s, const ArrayView& Z0) {
  return detail::with_float(Z0, [&](auto t) { return kernel_attention_context_size<decltype(t)>(s); });
}

// validate() of kernel_attention_forward.
KaCall validate_forward(const ArrayView& Z0, const ArrayView& V, const ArrayView& Bq,
                        const ArrayView& Ck, const ActivationChoice& choice,
                        const ArrayView& Z_out, const ArrayView& predictions,
                        const ArrayView& context, PredictionOutput prediction_output,
                        DeviceChoice device) {
  const KernelAttentionShape s = validate_parameters(Z0, V, Bq, Ck);
  auto acts = activations_per_head(choice, s.heads);
  const std::initializer_list<const ArrayView*> inputs = {&Z0, &V, &Bq, &Ck};
  require_output(Z_out, prompts_shape(s), Z0, inputs);
  require_output(predictions, predictions_shape(s, prediction_output), Z0, inputs);
  require_output(context, {s.batch, context_size(s, Z0)}, Z0, inputs);
  return {s, std::move(acts),
          detail::choose_device(device, {&Z0, &V, &Bq, &Ck, &Z_out, &predictions, &context})};
}

// validate() of kernel_attention_vjp: also d_Z_out and the saved context (made for
// `context_shape` = (B, d, n, L, H) in Z0's dtype).
KaCall validate_vjp(const ArrayView& Z0, const ArrayView& V, const ArrayView& Bq,
                    const ArrayView& Ck, const ActivationChoice& choice, const ArrayView& d_Z_out,
                    const ArrayView& context, const std::vector<index_t>& context_shape,
                    DeviceChoice device) {
  const KernelAttentionShape s = validate_parameters(Z0, V, Bq, Ck);
  auto acts = activations_per_head(choice, s.heads);
  require_input(d_Z_out, prompts_shape(s), Z0, detail::Finite::any);
  if (context.present) {
    const std::vector<index_t> expected = {s.batch, s.dim, s.context, s.layers, s.heads};
    detail::require(context_shape == expected && context.dtype == Z0.dtype &&
                        context.shape == std::vector<index_t>{s.batch, context_size(s, Z0)},
                    "context: expected the ForwardContext of forward(..., return_context=True) "
                    "for shape (B, d, n, L, H) = " + detail::shape_string(expected) +
                        " and dtype " + Z0.dtype_name);
    detail::require_layout(context);
  }
  return {s, std::move(acts), detail::choose_device(device, {&Z0, &V, &Bq, &Ck, &d_Z_out, &context})};
}

// validate() of kernel_attention_loss_and_grad: also y_q [B] and the outputs the caller passed
// (d_V, d_B, d_C, d_Z0, predictions, loss float64 [1]).
KaCall validate_loss(const ArrayView& Z0, const ArrayView& y_q, const ArrayView& V,
                     const ArrayView& Bq, const ArrayView& Ck, const ActivationChoice& choice,
                     const ArrayView& d_V, const ArrayView& d_B, const ArrayView& d_C,
                     const ArrayView& d_Z0, const ArrayView& predictions, const ArrayView& loss,
                     DeviceChoice device) {
  const KernelAttentionShape s = validate_parameters(Z0, V, Bq, Ck);
  auto acts = activations_per_head(choice, s.heads);
  require_input(y_q, {s.batch}, Z0);
  const std::initializer_list<const ArrayView*> inputs = {&Z0, &y_q, &V, &Bq, &Ck};
  require_gradient_outputs(s, Z0, inputs, d_V, d_B, d_C, d_Z0);
  require_output(predictions, predictions_shape(s), Z0, inputs);
  detail::require_loss_output(loss, Z0, inputs);
  return {s, std::move(acts),
          detail::choose_device(device, {&Z0, &y_q, &V, &Bq, &Ck, &d_V, &d_B, &d_C, &d_Z0,
                                         &predictions, &loss})};
}

// validate() of kernel_attention_predict_vjp: also d_y [B] (any values) and the outputs the caller
// passed (d_V, d_B, d_C, d_Z0).
KaCall validate_predict_vjp(const ArrayView& Z0, const ArrayView& V, const ArrayView& Bq,
                            const ArrayView& Ck, const ActivationChoice& choice,
                            const ArrayView& d_y, const ArrayView& d_V, const ArrayView& d_B,
                            const ArrayView& d_C, const ArrayView& d_Z0, DeviceChoice device) {
  const KernelAttentionShape s = validate_parameters(Z0, V, Bq, Ck);
  auto acts = activations_per_head(choice, s.heads);
  require_input(d_y, {s.batch}, Z0, detail::Finite::any);
  require_gradient_outputs(s, Z0, {&Z0, &d_y, &V, &Bq, &Ck}, d_V, d_B, d_C, d_Z0);
  return {s, std::move(acts),
          detail::choose_device(device, {&Z0, &d_y, &V, &Bq, &Ck, &d_V, &d_B, &d_C, &d_Z0})};
}

}  // namespace

void kernel_attention_forward(const ArrayView& Z0, const ArrayView& V, const ArrayView& Bq,
                              const ArrayView& Ck, const ActivationChoice& activations,
                              ArrayView& Z_out, ArrayView& predictions, ArrayView& context,
                              PredictionOutput prediction_output, DeviceChoice device,
                              CallSite& site) {
  const KaCall c = validate_forward(Z0, V, Bq, Ck, activations, Z_out, predictions, context,
                                   prediction_output, device);
  const KernelAttentionShape& s = c.shape;
  detail::make_outputs(site, Z0,
                       {{&Z_out, prompts_shape(s)},
                        {&predictions, predictions_shape(s, prediction_output)},
                        {&context, {s.batch, context_size(s, Z0)}}});
  detail::with_float(Z0, [&](auto t) {
    using T = decltype(t);
    site.run([&] {
      LSA_NATIVE_BACKEND(c.device, kernel_attention_forward, s, in<T>(Z0), in<T>(V), in<T>(Bq),
                         in<T>(Ck), c.activations.data(), out<T>(Z_out), out<T>(predictions),
                         out<T>(context), prediction_output);
    });
    if (c.device == Device::cuda)
      detail::check_host_outputs<T>({{"Z_L", &Z_out}, {"predictions", &predictions}},
                                    {detail::host_input<T>(Z0), detail::host_input<T>(V),
                                     detail::host_input<T>(Bq), detail::host_input<T>(Ck)});
  });
}

void kernel_attention_vjp(const ArrayView& Z0, const ArrayView& V, const ArrayView& Bq,
                          const ArrayView& Ck, const ActivationChoice& activations,
                          const ArrayView& d_Z_out, ArrayView& d_V, ArrayView& d_B, ArrayView& d_C,
                          ArrayView& d_Z0, const ArrayView& context,
                          const std::vector<index_t>& context_shape, DeviceChoice device,
                          CallSite& site) {
  const KaCall c =
      validate_vjp(Z0, V, Bq, Ck, activations, d_Z_out, context, context_shape, device);
  const KernelAttentionShape& s = c.shape;
  make_gradient_outputs(site, Z0, s, d_V, d_B, d_C, d_Z0);
  detail::with_float(Z0, [&](auto t) {
    using T = decltype(t);
    site.run([&] {
      LSA_NATIVE_BACKEND(c.device, kernel_attention_vjp, s, in<T>(Z0), in<T>(V), in<T>(Bq),
                         in<T>(Ck), c.activations.data(), in<T>(d_Z_out), out<T>(d_V), out<T>(d_B),
                         out<T>(d_C), out<T>(d_Z0), in<T>(context));
    });
    if (c.device == Device::cuda)
      detail::check_host_outputs<T>(
          {{"d_V", &d_V}, {"d_B", &d_B}, {"d_C", &d_C}, {"d_Z0", &d_Z0}},
          {detail::host_input<T>(Z0), detail::host_input<T>(V), detail::host_input<T>(Bq),
           detail::host_input<T>(Ck), detail::host_input<T>(d_Z_out)});
  });
}

double kernel_attention_loss_and_grad(const ArrayView& Z0, const ArrayView& y_q, const ArrayView& V,
                                      const ArrayView& Bq, const ArrayView& Ck,
                                      const ActivationChoice& activations, ArrayView& d_V,
                                      ArrayView& d_B, ArrayView& d_C, ArrayView& d_Z0,
                                      ArrayView& predictions, ArrayView& loss_out,
                                      DeviceChoice device, CallSite& site) {
  const KaCall c = validate_loss(Z0, y_q, V, Bq, Ck, activations, d_V, d_B, d_C, d_Z0, predictions,
                                 loss_out, device);
  const KernelAttentionShape& s = c.shape;
  make_gradient_outputs(site, Z0, s, d_V, d_B, d_C, d_Z0);
  detail::make_outputs(site, Z0, {{&predictions, predictions_shape(s)}});
  return detail::with_float(Z0, [&](auto t) {
    using T = decltype(t);
    double loss = std::numeric_limits<double>::quiet_NaN();
    site.run([&] {
#if LSA_NATIVE_HAVE_CUDA
      if (loss_out.present && detail::use_cuda(c.device)) {  // written where it is: no wait
        cuda::kernel_attention_loss_and_grad_into(
            s, in<T>(Z0), in<T>(y_q), in<T>(V), in<T>(Bq), in<T>(Ck), c.activations.data(),
            out<T>(d_V), out<T>(d_B), out<T>(d_C), out<T>(d_Z0), out<T>(predictions),
            out<double>(loss_out));
        if (!loss_out.on_cuda()) loss = *loss_out.as<double>();
        return;
      }
#endif
      loss = LSA_NATIVE_BACKEND(c.device, kernel_attention_loss_and_grad, s, in<T>(Z0), in<T>(y_q),
                                in<T>(V), in<T>(Bq), in<T>(Ck), c.activations.data(), out<T>(d_V),
                                out<T>(d_B), out<T>(d_C), out<T>(d_Z0), out<T>(predictions));
      detail::store_loss(loss_out, loss);
    });
    if (c.device == Device::cuda && !Z0.on_cuda()) {
      const auto inputs = {detail::host_input<T>(Z0), detail::host_input<T>(y_q),
                           detail::host_input<T>(V), detail::host_input<T>(Bq),
                           detail::host_input<T>(Ck)};
      detail::check_output<T>(std::isfinite(loss), "loss", inputs);
      detail::check_host_outputs<T>({{"d_V", &d_V}, {"d_B", &d_B}, {"d_C", &d_C}, {"d_Z0", &d_Z0},
                                     {"predictions", &predictions}},
                                    inputs);
    }
    return loss;
  });
}

double kernel_attention_loss_and_grad(const ArrayView& Z0, const ArrayView& y_q, const ArrayView& V,
                                      const ArrayView& Bq, const ArrayView& Ck,
                                      const ActivationChoice& activations, ArrayView& d_V,
                                      ArrayView& d_B, ArrayView& d_C, ArrayView& d_Z0,
                                      ArrayView& predictions, DeviceChoice device, CallSite& site) {
  ArrayView no_loss;
  no_loss.name = "loss";
  return kernel_attention_loss_and_grad(Z0, y_q, V, Bq, Ck, activations, d_V, d_B, d_C, d_Z0,
                                        predictions, no_loss, device, site);
}

void kernel_attention_predict_vjp(const ArrayView& Z0, const ArrayView& V, const ArrayView& Bq,
                                  const ArrayView& Ck, const ActivationChoice& activations,
                                  const ArrayView& d_y, ArrayView& d_V, ArrayView& d_B,
                                  ArrayView& d_C, ArrayView& d_Z0, DeviceChoice device,
                                  CallSite& site) {
  const KaCall c =
      validate_predict_vjp(Z0, V, Bq, Ck, activations, d_y, d_V, d_B, d_C, d_Z0, device);
  const KernelAttentionShape& s = c.shape;
  make_gradient_outputs(site, Z0, s, d_V, d_B, d_C, d_Z0);
  detail::with_float(Z0, [&](auto t) {
    using T = decltype(t);
    site.run([&] {
      LSA_NATIVE_BACKEND(c.device, kernel_attention_predict_vjp, s, in<T>(Z0), in<T>(V), in<T>(Bq),
                         in<T>(Ck), c.activations.data(), in<T>(d_y), out<T>(d_V), out<T>(d_B),
                         out<T>(d_C), out<T>(d_Z0));
    });
    if (c.device == Device::cuda)
      detail::check_host_outputs<T>(
          {{"d_V", &d_V}, {"d_B", &d_B}, {"d_C", &d_C}, {"d_Z0", &d_Z0}},
          {detail::host_input<T>(Z0), detail::host_input<T>(V), detail::host_input<T>(Bq),
           detail::host_input<T>(Ck), detail::host_input<T>(d_y)});
  });
}
#undef LSA_NATIVE_BACKEND

// The public functions, for float and double (kernel_attention.hpp).
#define LSA_NATIVE_KA_INSTANTIATE(R, name, params) template R name(LSA_NATIVE_UNPAREN params, Device);
LSA_NATIVE_KA_API(LSA_NATIVE_KA_INSTANTIATE, float)
LSA_NATIVE_KA_API(LSA_NATIVE_KA_INSTANTIATE, double)
#undef LSA_NATIVE_KA_INSTANTIATE
template index_t kernel_attention_context_size<float>(const KernelAttentionShape&);
template index_t kernel_attention_context_size<double>(const KernelAttentionShape&);

}  // namespace lsa_native
