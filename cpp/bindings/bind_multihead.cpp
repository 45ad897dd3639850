// Bindings of the multi-head LSA entry points (multihead.hpp), with the Python signatures of the
// LSA ones (lsa_entry_points.hpp): one array view per operand, validate() once in the dispatcher
// (multihead_dispatch.cpp), the GIL released around the kernels.
#include "lsa_entry_points.hpp"
#include "lsa_native/multihead.hpp"

namespace lsa_native::bindings {

namespace {

// The separate parametrization's operands: W_k [H, r, d+1] sets the shape and dtype; the others
// C-contiguous arrays of that dtype (fused_operand's rules), on the GPU when any is a CUDA array.
struct SeparateCall {
  index_t heads = 0, rank = 0, rows = 0;
  Device device = Device::cpu;
  bool single = false;
};

// `named`: every operand with its Python name; all host arrays or all CUDA arrays (the side the
// call runs on), else a ValueError naming each one's side.
SeparateCall separate_call(const py::object& W_k,
                           std::initializer_list<std::pair<const char*, py::handle>> named) {
  py::list keep;
  const ArrayView k = array_view(W_k, "W_k", keep);
  if (!k.present || k.shape.size() != 3)
    throw Error("W_k: expected shape (H, r, d+1), got " +
                (k.present ? shape_string(k.shape) : std::string("None")));
  SeparateCall c{k.shape[0], k.shape[1], k.shape[2], Device::cpu, k.dtype == DType::float32};
  std::string sides;
  bool host = false, cuda = false;
  for (const auto& [name, obj] : named) {
    const ArrayView v = array_view(obj, name, keep);
    if (!v.present) continue;
    (v.on_cuda() ? cuda : host) = true;
    sides += std::string(sides.empty() ? "" : ", ") + name + (v.on_cuda() ? " CUDA" : " host");
  }
  if (host && cuda)
    throw Error("expected all operands on one device (all host or all CUDA arrays), got " + sides);
  if (cuda) c.device = Device::cuda;
  return c;
}

// The outputs share no memory with the inputs or an earlier output: the sums read the inputs
// while writing the outputs.
void require_separate(std::initializer_list<const ArrayView*> outputs,
                      std::initializer_list<const ArrayView*> inputs) {
  std::vector<const ArrayView*> seen(inputs);
  for (const ArrayView* out : outputs) {
    for (const ArrayView* other : seen)
      if (overlaps(*out, *other))
        throw Error("out: must not share memory with an operand or another output (" +
                    std::string(out->name) + " overlaps " + other->name + ")");
    seen.push_back(out);
  }
}

template <class T>
void merge_kq(const SeparateCall& c, const py::object& W_k, const py::object& W_q,
              const py::object& W_kq) {
  py::list keep;
  const std::vector<index_t> sk{c.heads, c.rank, c.rows}, sw{c.heads, c.rows, c.rows};
  const ArrayView k = fused_operand<T>(W_k, "W_k", sk, c.device, false, keep),
                  q = fused_operand<T>(W_q, "W_q", sk, c.device, false, keep),
                  out = fused_operand<T>(W_kq, "W_kq", sw, c.device, true, keep);
  require_separate({&out}, {&k, &q});
  py::gil_scoped_release release;
  multihead_merge_kq(c.heads, c.rank, c.rows, k.as<const T>(), q.as<const T>(), out.as<T>(), c.device);
}

template <class T>
void chain_kq(const SeparateCall& c, const py::object& W_k, const py::object& W_q,
              const py::object& d_W_kq, const py::object& d_W_k, const py::object& d_W_q) {
  py::list keep;
  const std::vector<index_t> sk{c.heads, c.rank, c.rows}, sw{c.heads, c.rows, c.rows};
  const ArrayView k = fused_operand<T>(W_k, "W_k", sk, c.device, false, keep),
                  q = fused_operand<T>(W_q, "W_q", sk, c.device, false, keep),
                  g = fused_operand<T>(d_W_kq, "d_W_kq", sw, c.device, false, keep),
                  dk = fused_operand<T>(d_W_k, "d_W_k", sk, c.device, true, keep),
                  dq = fused_operand<T>(d_W_q, "d_W_q", sk, c.device, true, keep);
  require_separate({&dk, &dq}, {&k, &q, &g});
  py::gil_scoped_release release;
  multihead_chain_kq(c.heads, c.rank, c.rows, k.as<const T>(), q.as<const T>(), g.as<const T>(),
                     dk.as<T>(), dq.as<T>(), c.device);
}

}  // namespace

void bind_multihead(py::module_& m) {
  m.def(
      "multihead_merge_kq",
      [](const py::object& W_k, const py::object& W_q, const py::object& W_kq) {
        const SeparateCall c = separate_call(W_k, {{"W_k", W_k}, {"W_q", W_q}, {"out", W_kq}});
        c.single ? merge_kq<float>(c, W_k, W_q, W_kq) : merge_kq<double>(c, W_k, W_q, W_kq);
      },
      py::arg("W_k"), py::arg("W_q"), py::arg("W_kq"),
      "W_kq [H, d+1, d+1] = W^K_hᵀ W^Q_h written in place from W_k, W_q [H, r, d+1] (multihead.hpp's "
      "multihead_merge_kq): C-contiguous arrays of one dtype, on the GPU when any is a CUDA array "
      "(then only queued).");
  m.def(
      "multihead_chain_kq",
      [](const py::object& W_k, const py::object& W_q, const py::object& d_W_kq,
         const py::object& d_W_k, const py::object& d_W_q) {
        const SeparateCall c = separate_call(
            W_k, {{"W_k", W_k}, {"W_q", W_q}, {"d_W_kq", d_W_kq}, {"out[0]", d_W_k}, {"out[1]", d_W_q}});
        c.single ? chain_kq<float>(c, W_k, W_q, d_W_kq, d_W_k, d_W_q)
                 : chain_kq<double>(c, W_k, W_q, d_W_kq, d_W_k, d_W_q);
      },
      py::arg("W_k"), py::arg("W_q"), py::arg("d_W_kq"), py::arg("d_W_k"), py::arg("d_W_q"),
      "d_W_k = W^Q_h dW^KQ_hᵀ, d_W_q = W^K_h dW^KQ_h [H, r, d+1] written in place (multihead.hpp's "
      "multihead_chain_kq); operands as multihead_merge_kq's.");
  def_forward(m, "multihead_lsa_predict", static_cast<ForwardEntry>(&multihead_lsa_predict),
              "ŷ [B] of prompts E [B, d+1, N+1] and H heads W_pv, W_kq [H, d+1, d+1] "
              "(multihead.hpp), written into `out` when given.");
  def_forward(m, "multihead_lsa_forward", static_cast<ForwardEntry>(&multihead_lsa_forward),
              "F [B, d+1, N+1] of the H-head model (multihead.hpp), written into `out` when given.");
  def_loss_and_grad(m, "multihead_lsa_loss_and_grad",
                    static_cast<LossIntoEntry>(&multihead_lsa_loss_and_grad),
                    "(loss, dW_pv, dW_kq[, y_hat]) of multihead.hpp's multihead_lsa_loss_and_grad "
                    "(gradients [H, d+1, d+1]); out=(dW_pv, dW_kq) written in place, loss= a "
                    "float64 [1] array on E's side that receives the loss (returned in its place).");
  def_vjp(m, "multihead_lsa_vjp", "d_F", static_cast<VjpEntry>(&multihead_lsa_vjp),
          "(dW_pv, dW_kq, dE) of multihead_lsa_forward for the upstream d_F [B, d+1, N+1].");
  def_vjp(m, "multihead_lsa_predict_vjp", "d_y", static_cast<VjpEntry>(&multihead_lsa_predict_vjp),
          "(dW_pv, dW_kq, dE) of multihead_lsa_predict for the upstream d_y [B].");
}

}  // namespace lsa_native::bindings
