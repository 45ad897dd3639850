// Bindings of the batched LSA entry points (lsa.hpp): each operand becomes one array view (numpy,
// __cuda_array_interface__ or __dlpack__: array_view.hpp), the dispatcher (dispatch.cpp)
// validates them once and runs the backend their devices ask for, with the GIL released.
#include "lsa_entry_points.hpp"
#include "lsa_native/lsa.hpp"

namespace lsa_native::bindings {

void bind_lsa(py::module_& m) {
  def_forward(m, "lsa_predict", static_cast<ForwardEntry>(&lsa_predict),
              "ŷ [B] of prompts E [B, d+1, N+1] (lsa.hpp), written into `out` when given.");
  def_forward(m, "lsa_forward", static_cast<ForwardEntry>(&lsa_forward),
              "F [B, d+1, N+1] (lsa.hpp), written into `out` when given.");
  def_loss_and_grad(m, "lsa_loss_and_grad", static_cast<LossIntoEntry>(&lsa_loss_and_grad),
                    "(loss, dW_pv, dW_kq[, y_hat]) of lsa.hpp's lsa_loss_and_grad; out=(dW_pv, "
                    "dW_kq) written in place; loss= a float64 [1] array on E's side receiving the "
                    "loss (returned in its place: on the GPU nothing waits).");
  def_vjp(m, "lsa_vjp", "d_F", static_cast<VjpEntry>(&lsa_vjp),
          "(dW_pv, dW_kq, dE) of lsa_forward for the upstream d_F [B, d+1, N+1].");
  def_vjp(m, "lsa_predict_vjp", "d_y", static_cast<VjpEntry>(&lsa_predict_vjp),
          "(dW_pv, dW_kq, dE) of lsa_predict for the upstream d_y [B].");
}

}  // namespace lsa_native::bindings
