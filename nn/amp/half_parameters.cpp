#include "nn/amp/half_parameters.h"

#include "core/error.h"
#include "core/grad_mode.h"

namespace stoke::nn::amp {

int64_t half_precision_parameters(Module& root, DType dtype) {
  STOKE_CHECK(dtype == DType::f16 || dtype == DType::bf16, "nn::amp::half_precision_parameters",
              "expected f16 or bf16, got ", dtype_name(dtype));
  NoGradGuard no_grad;
  int64_t cast = 0;
  for_each_module(root, [&](Module& m) {
    const std::string kind = m.name();
    if (kind != "Conv2d" && kind != "ConvTranspose2d" && kind != "Linear") return;
    for (const auto& [name, p] : m.named_parameters(/*recurse=*/false)) {
      if (p.dtype() == dtype) continue;
      set_data(p, p.to(dtype));
      cast += p.numel();
    }
  });
  return cast;
}

}  // namespace stoke::nn::amp
