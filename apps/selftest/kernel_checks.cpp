// The raw launchers of stoke's own CUDA kernels (cuda/kernels/) against the CPU ops: every SGEMM
// version and tile (NN, NT, TN, a misaligned A), the implicit-GEMM convolution at every tile
// (stride, padding, dilation, groups, bias), the reduction and softmax launchers, and the
// launchers no ops:: entry point uses (cat, embedding and its backward). Builds against the real
// backend and cuda/emu alike.
#include <array>
#include <string>

#include "apps/selftest/ops_checks.h"
#include "apps/selftest/vendor_checks.h"
#include "cuda/kernels/conv2d_implicit_gemm.h"
#include "cuda/kernels/index.h"
#include "cuda/kernels/reduce.h"
#include "cuda/kernels/sgemm.h"
#include "cuda/kernels/softmax.h"
#include "cuda/runtime/stream.h"

namespace stoke::selftest {
namespace kernel_checks {

using ops_checks::dev;
using ops_checks::dev_empty;
using ops_checks::randint_cpu;
using ops_checks::randn_cpu;
using ops_checks::rounded;
using ops_checks::upload;

// stoke's SGEMM versions and tiles, NN / NT / TN, odd sizes and a misaligned (offset by one) A.
void check_sgemm(Suite& s, bool quick) {
  std::vector<std::array<int64_t, 3>> sizes = {{33, 17, 20}};
  if (!quick) {
    sizes.push_back({70, 65, 33});
    sizes.push_back({127, 33, 65});
    sizes.push_back({200, 96, 300});
    sizes.push_back({1024, 1024, 1024});
  }
  for (auto [m, n, k] : sizes) {
    for (cuda::SgemmVersion v : cuda::kSgemmVersions) {
      for (int tile : cuda::sgemm_tile_sizes(v)) {
        for (int mode = 0; mode < 4; ++mode) {  // NN, NT, TN, NN with A offset by one element
          const bool ta = mode == 2, tb = mode == 1, shifted = mode == 3;
          const Tensor a = randn_cpu({ta ? k * m + 1 : m * k + 1}, 400);
          const Tensor a2 =
              a.narrow(0, shifted ? 1 : 0, m * k).view(ta ? Shape{k, m} : Shape{m, k});
          const Tensor b = randn_cpu(tb ? Shape{n, k} : Shape{k, n}, 401);
          const Tensor ref = ops::matmul(ta ? a2.t() : a2, tb ? b.t() : b);
          const Tensor da = a.to(dev()), db = b.to(dev());
          Tensor dc = dev_empty({m, n}, DType::f32);
          cuda::sgemm(ta, tb, m, n, k, 1.0f, da.data<float>() + (shifted ? 1 : 0), ta ? m : k,
                      db.data<float>(), tb ? k : n, 0.0f, dc.data<float>(), n,
                      cuda::current_stream(), {.version = v, .tile = tile});
          static constexpr const char* kModes[] = {" NN", " NT", " TN", " NN A+1"};
          s.compare(std::string("sgemm ") + cuda::sgemm_version_name(v) + " tile " +
                        std::to_string(tile) + kModes[mode],
                    dims({m, n, k}), "f32", dc, ref, 1e-4);
          // Quick: the transposes and the misaligned A at the default tile only.
          if (quick && tile != cuda::sgemm_tile_sizes(v).front()) break;
        }
      }
    }
  }
}

// stoke's implicit-GEMM convolution (f32, with bias) at every tile against ops::conv2d.
void check_conv2d_implicit_gemm(Suite& s, bool quick) {
  struct Case {
    int64_t n, c, h, w, k, r, st, pad, dil, groups;
  };
  std::vector<Case> cases = {{2, 3, 8, 8, 4, 3, 1, 1, 1, 1},
                             {2, 8, 9, 9, 6, 3, 2, 1, 1, 2},
                             {1, 4, 11, 10, 5, 3, 1, 2, 2, 1}};
  if (!quick) {
    cases.push_back({4, 16, 15, 15, 8, 3, 2, 1, 1, 1});
    cases.push_back({2, 8, 7, 9, 8, 1, 1, 0, 1, 1});
    cases.push_back({8, 64, 32, 32, 64, 3, 1, 1, 1, 1});
  }
  for (const Case& c : cases) {
    const cuda::Conv2dGeometry g{.batch = c.n,
                                 .channels = c.c,
                                 .height = c.h,
                                 .width = c.w,
                                 .out_channels = c.k,
                                 .kernel_h = c.r,
                                 .kernel_w = c.r,
                                 .stride_h = c.st,
                                 .stride_w = c.st,
                                 .pad_h = c.pad,
                                 .pad_w = c.pad,
                                 .dilation_h = c.dil,
                                 .dilation_w = c.dil,
                                 .groups = c.groups};
    const Tensor x = randn_cpu({c.n, c.c, c.h, c.w}, 410);
    const Tensor w = randn_cpu({c.k, c.c / c.groups, c.r, c.r}, 411);
    const Tensor bias = randn_cpu({c.k}, 412);
    const Tensor ref = ops::conv2d(x, w, bias,
                                   {.stride = {c.st, c.st},
                                    .padding = {c.pad, c.pad},
                                    .dilation = {c.dil, c.dil},
                                    .groups = c.groups});
    const Tensor dx = x.to(dev()), dw = w.to(dev()), db = bias.to(dev());
    Tensor y = dev_empty(ref.shape(), DType::f32);
    for (int tile : cuda::conv2d_implicit_gemm_tile_sizes()) {
      cuda::conv2d_implicit_gemm_forward(g, dx.data<float>(), dw.data<float>(), db.data<float>(),
                                         y.data<float>(), cuda::current_stream(), tile);
      s.compare(detail::str_cat("conv2d_implicit_gemm tile ", tile),
                detail::str_cat(dims({c.n, c.c, c.h, c.w}), " k", c.k, " s", c.st, " d", c.dil,
                                " g", c.groups),
                "f32", y, ref, 1e-4);
    }
  }
}

// The reduction and softmax launchers over rows and over a middle dim.
void check_reduce_softmax(Suite& s, bool quick) {
  std::vector<std::array<int64_t, 3>> sizes = {{7, 33, 1}, {3, 2000, 1}, {4, 50, 9}, {2, 40001, 1}};
  if (!quick) sizes.push_back({64, 100000, 1});
  for (auto [outer, n, inner] : sizes) {
    for (DType dt : ops_checks::float_types()) {
      const Tensor x = randn_cpu({outer, n, inner}, 420), rx = rounded(x, dt);
      const Tensor dx = upload(x, dt);
      Tensor out = dev_empty({outer, inner}, dt);
      Tensor idx = dev_empty({outer, inner}, DType::i64);
      const std::string shape = dims({outer, n, inner}), dn = dtype_name(dt);
      const double tol = tolerance(dt);
      const size_t ws = cuda::reduce_workspace_bytes(outer, n, inner);
      Tensor workspace = dev_empty({static_cast<int64_t>(ws)}, DType::u8);
      void* w = ws ? workspace.data_ptr() : nullptr;
      cuda::reduce(cuda::ReduceOp::sum, dt, dx.data_ptr(), out.data_ptr(), nullptr, outer, n, inner,
                   w, cuda::current_stream());
      s.compare("reduce sum", shape, dn, out, ops::sum(rx, {1}), tol);
      cuda::reduce(cuda::ReduceOp::max, dt, dx.data_ptr(), out.data_ptr(), idx.data<int64_t>(),
                   outer, n, inner, w, cuda::current_stream());
      const auto ref_max = ops::max_with_indices(rx, 1);
      s.compare("reduce max", shape, dn, out, ref_max.values, 0);
      s.compare("reduce max indices", shape, "i64", idx, ref_max.indices, 0);
      Tensor y = dev_empty(x.shape(), dt);
      cuda::softmax_forward(dt, dx.data_ptr(), y.data_ptr(), outer, n, inner, false,
                            cuda::current_stream());
      s.compare("softmax", shape, dn, y, ops::softmax(rx, 1), tol);
      cuda::softmax_forward(dt, dx.data_ptr(), y.data_ptr(), outer, n, inner, true,
                            cuda::current_stream());
      s.compare("log_softmax", shape, dn, y, ops::log_softmax(rx, 1), tol);
    }
  }
}

// cat and embedding launchers (the ops glue uses strided copies and index_select instead).
void check_cat_embedding(Suite& s, bool quick) {
  const int64_t outer = quick ? 3 : 64, inner = quick ? 5 : 129;
  for (DType dt : {DType::f32, DType::f16, DType::i64, DType::u8}) {
    const std::array<int64_t, 3> sizes = {2, 7, 1};
    std::vector<Tensor> parts, dparts;
    std::vector<const void*> ptrs;
    for (int64_t i = 0; i < 3; ++i) {
      parts.push_back(randint_cpu(0, 100, {outer, sizes[i], inner}, DType::i64, 430 + i).to(dt));
      dparts.push_back(parts.back().to(dev()));
      ptrs.push_back(dparts.back().data_ptr());
    }
    Tensor out = dev_empty({outer, 10, inner}, dt);
    cuda::cat(dtype_size(dt), 3, ptrs.data(), sizes.data(), outer, inner, out.data_ptr(),
              cuda::current_stream());
    s.compare("cuda::cat (dim 1)", dims({outer, 2, inner}) + " +7 +1", dtype_name(dt), out,
              ops::cat(parts, 1), 0);
  }
  const int64_t V = quick ? 11 : 5000, D = quick ? 6 : 257, count = quick ? 9 : 4096;
  const Tensor ids = randint_cpu(0, V, {count}, DType::i64, 440);
  for (DType dt : ops_checks::float_types()) {
    const Tensor w = randn_cpu({V, D}, 441), rw = rounded(w, dt), dw = upload(w, dt);
    Tensor out = dev_empty({count, D}, dt);
    const Tensor did = ids.to(dev());
    cuda::embedding(dtype_size(dt), dw.data_ptr(), did.data<int64_t>(), out.data_ptr(), count, V, D,
                    cuda::current_stream());
    const std::string shape = dims({V, D}) + " [" + std::to_string(count) + "]";
    s.compare("cuda::embedding", shape, dtype_name(dt), out, ops::embedding(rw, ids), 0);
    const Tensor g = randn_cpu({count, D}, 442);
    const Tensor dg = upload(g, dt);
    Tensor gw = dev_empty({V, D}, dt);
    cuda::embedding_backward(dt, dg.data_ptr(), did.data<int64_t>(), gw.data_ptr(), count, V, D,
                             cuda::current_stream());
    s.compare("cuda::embedding_backward", shape, dtype_name(dt), gw,
              ops::embedding_backward(rounded(g, dt), ids, V), 2 * tolerance(dt));
  }
}

}  // namespace kernel_checks

void run_kernel_checks(Suite& s, bool quick) {
  using namespace kernel_checks;
  s.run("sgemm", [&](Suite& x) { check_sgemm(x, quick); });
  s.run("conv2d_implicit_gemm", [&](Suite& x) { check_conv2d_implicit_gemm(x, quick); });
  s.run("reduce/softmax", [&](Suite& x) { check_reduce_softmax(x, quick); });
  s.run("cat/embedding", [&](Suite& x) { check_cat_embedding(x, quick); });
}

}  // namespace stoke::selftest
