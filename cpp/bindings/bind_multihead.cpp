// Bindings of the multi-head LSA entry points (multihead.hpp), with the Python signatures of the
// LSA ones (lsa_entry_points.hpp): one array view per operand, validate() once in the dispatcher
// (multihead_dispatch.cpp), the GIL released around the kernels.
#include "lsa_entry_points.hpp"
#include "lsa_native/multihead.hpp"

namespace lsa_native::bindings {

void bind_multihead(py::module_& m) {
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
