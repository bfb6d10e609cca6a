// ZeroOptimizer's consolidated state_dict (the unsharded optimizer's keys, so that a checkpoint
// loads at any world size, with or without ZeRO) and its memory report.
#include <algorithm>
#include <map>
#include <set>
#include <sstream>
#include <unordered_set>

#include "core/error.h"
#include "core/grad_mode.h"
#include "dist/zero_state.h"
#include "ops/creation.h"

namespace stoke::dist {

namespace {

// "state.<i>.<buffer>" -> (i, buffer); anything else is an error naming the key.
std::pair<size_t, std::string> parse_key(const std::string& key, const char* op) {
  const std::string prefix = "state.";
  const size_t dot = key.find('.', prefix.size());
  STOKE_CHECK(key.rfind(prefix, 0) == 0 && dot != std::string::npos && dot > prefix.size(), op,
              "unexpected optimizer state key '", key, "' (expected state.<index>.<buffer>)");
  const std::string index = key.substr(prefix.size(), dot - prefix.size());
  STOKE_CHECK(std::all_of(index.begin(), index.end(), [](char c) { return c >= '0' && c <= '9'; }),
              op, "unexpected optimizer state key '", key, "' (expected state.<index>.<buffer>)");
  return {static_cast<size_t>(std::stoull(index)), key.substr(dot + 1)};
}

// Per-element buffers (momentum, exp_avg, ...) are sharded like the parameters; i64 scalars
// (Adam's step) are one value per parameter, the same on every piece of it.
bool is_scalar(const Tensor& t) {
  return t.dtype() == DType::i64 && t.numel() == 1;
}

// The union over the ranks of each rank's names (a rank without pieces knows none), in order.
std::vector<std::string> union_of_names(Communicator& comm, const std::set<std::string>& names,
                                        Device device) {
  std::string mine;
  for (const std::string& n : names) mine += n + "\n";
  std::set<std::string> out;
  for (const std::string& text : allgather_strings(comm, mine, device)) {
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) out.insert(line);
  }
  return {out.begin(), out.end()};
}

}  // namespace

nn::NamedTensors ZeroOptimizer::state_dict() const {
  State& s = *state_;
  NoGradGuard no_grad;
  const char* op = "stoke::ZeroOptimizer::state_dict";
  const Device device = s.params.front().device();
  const size_t n = s.params.size();
  // This rank's pieces' state, by (parameter, buffer).
  std::map<std::pair<size_t, std::string>, Tensor> local;
  std::set<std::string> element_names, scalar_names;
  for (const auto& [key, t] : s.inner->state_dict()) {
    const auto [k, buffer] = parse_key(key, op);
    STOKE_CHECK(k < s.pieces.size(), op, "the wrapped optimizer has state for piece ", k, " of ",
                s.pieces.size());
    local[{s.pieces[k].param, buffer}] = t;
    (is_scalar(t) ? scalar_names : element_names).insert(buffer);
  }
  const std::vector<std::string> elements = union_of_names(*s.comm, element_names, device);
  const std::vector<std::string> scalars = union_of_names(*s.comm, scalar_names, device);

  // Which parameters have which state (a rank may own no piece of a parameter): a max over the
  // ranks of 0/1 per buffer and parameter, and the scalars' values (the same on every owner).
  const size_t rows = elements.size() + scalars.size();
  std::vector<double> flags(rows * n, 0.0);
  for (size_t e = 0; e < elements.size(); ++e)
    for (size_t i = 0; i < n; ++i) flags[e * n + i] = local.count({i, elements[e]}) ? 1.0 : 0.0;
  for (size_t c = 0; c < scalars.size(); ++c)
    for (size_t i = 0; i < n; ++i) {
      auto it = local.find({i, scalars[c]});
      // +1 so that a stored 0 differs from "absent here".
      if (it != local.end()) flags[(elements.size() + c) * n + i] = it->second.item() + 1.0;
    }
  if (flags.empty()) flags.push_back(0.0);  // every rank still takes part in the allreduce
  Tensor present =
      from_vector<double>(flags, {static_cast<int64_t>(flags.size())}, {.dtype = DType::f64})
          .to(device);
  s.comm->allreduce(present, ReduceOp::max);
  const std::vector<double> all_flags = present.to(Device::cpu()).to_vector<double>();

  nn::NamedTensors out;
  // Per buffer: each flat's shard (zero where this rank has no piece), all-gathered.
  std::map<std::string, std::vector<Tensor>> gathered;
  for (const std::string& name : elements) {
    for (Flat& flat : s.flats) {
      // The state's dtype: f32 over master weights, else the parameters'.
      const DType dtype = flat.master.defined() ? DType::f32 : flat.dtype;
      Tensor shard = zeros({flat.shard}, {.dtype = dtype, .device = flat.device});
      for (const Piece& piece : s.pieces) {
        const Bucket& b = s.buckets[s.bucket_of[piece.param]];
        if (&s.flats[b.flat] != &flat) continue;
        auto it = local.find({piece.param, name});
        if (it == local.end()) continue;
        shard.narrow(0, b.shard_begin + piece.chunk_offset, piece.numel)
            .copy_(it->second.reshape({-1}));
      }
      Tensor whole = empty({flat.shard * s.size}, {.dtype = dtype, .device = flat.device});
      s.allgather(shard, whole);
      gathered[name].push_back(whole);
    }
  }
  for (size_t i = 0; i < n; ++i) {
    const std::string prefix = "state." + std::to_string(i) + ".";
    for (size_t c = 0; c < scalars.size(); ++c) {
      const double v = all_flags[(elements.size() + c) * n + i];
      if (v == 0) continue;
      Tensor t = empty({}, {.dtype = DType::i64});
      *t.data<int64_t>() = static_cast<int64_t>(v) - 1;
      out.emplace_back(prefix + scalars[c], t);
    }
    const Bucket& b = s.buckets[s.bucket_of[i]];
    const Tensor& p = s.params[i];
    for (size_t e = 0; e < elements.size(); ++e) {
      if (all_flags[e * n + i] == 0) continue;
      const Flat& flat = s.flats[b.flat];
      const Tensor& whole = gathered[elements[e]][b.flat];
      Tensor full_state = empty({p.numel()}, {.dtype = whole.dtype(), .device = flat.device});
      // The parameter's elements [o, o + len) of its bucket, chunk by chunk from their owners.
      const int64_t o = s.offset_in_bucket[i], len = p.numel();
      for (int q = 0; q < s.size; ++q) {
        const int64_t lo = std::max(o, q * b.chunk), hi = std::min(o + len, (q + 1) * b.chunk);
        if (lo >= hi) continue;
        full_state.narrow(0, lo - o, hi - lo)
            .copy_(whole.narrow(0, q * flat.shard + b.shard_begin + lo - q * b.chunk, hi - lo));
      }
      out.emplace_back(prefix + elements[e], full_state.reshape(p.shape()));
    }
  }
  return out;
}

void ZeroOptimizer::load_state_dict(const nn::NamedTensors& state) {
  State& s = *state_;
  NoGradGuard no_grad;
  const char* op = "stoke::ZeroOptimizer::load_state_dict";
  nn::NamedTensors mine;
  for (const auto& [key, t] : state) {
    const auto [i, buffer] = parse_key(key, op);
    STOKE_CHECK(i < s.params.size(), op, "optimizer state '", key, "' is for parameter ", i,
                ", but there are ", s.params.size(), " parameters");
    const Tensor& p = s.params[i];
    if (is_scalar(t)) {
      for (size_t k : s.pieces_of[i])
        mine.emplace_back("state." + std::to_string(k) + "." + buffer, t);
      continue;
    }
    STOKE_CHECK(t.numel() == p.numel(), op, "optimizer state '", key, "': expected ", p.numel(),
                " elements (parameter ", i, " is ", p.shape(), "), got ", t.shape());
    const Tensor flat = t.contiguous().reshape({-1});
    for (size_t k : s.pieces_of[i]) {
      const Piece& piece = s.pieces[k];
      Tensor slice = flat.narrow(0, piece.param_offset, piece.numel);
      // In the piece's dtype, as torch casts a loaded state to its parameter's: f32 over master
      // weights from a plain half optimizer's state, or half from a master run's.
      if (is_floating(slice.dtype()) && slice.dtype() != piece.tensor.dtype())
        slice = slice.to(piece.tensor.dtype());
      mine.emplace_back("state." + std::to_string(k) + "." + buffer, slice);
    }
  }
  s.inner->load_state_dict(mine);
  s.refresh_masters();
}

ZeroMemoryReport ZeroOptimizer::memory_report() const {
  const State& s = *state_;
  ZeroMemoryReport r;
  std::unordered_set<const Storage*> seen;
  auto count = [&](int64_t& field, const Tensor& t) {
    if (!t.defined() || !seen.insert(t.storage().get()).second) return;
    field += static_cast<int64_t>(t.storage()->nbytes());
    ++r.storages;
  };
  for (const Flat& flat : s.flats) {
    count(r.parameter_bytes, flat.params);
    count(r.parameter_bytes, flat.shard_params);
    count(r.gradient_bytes, flat.grads);
    count(r.gradient_bytes, flat.shard_grads);
    count(r.communication_bytes, flat.chunk_tmp);
    count(r.master_bytes, flat.master);
    count(r.master_bytes, flat.master_grads);
    for (const CommBuffer& buf : flat.pool) {
      count(r.communication_bytes, buf.in);
      count(r.communication_bytes, buf.out);
    }
    r.padded_parameters += flat.padded;
    r.shard_parameters += flat.shard;
  }
  for (const Tensor& p : s.params) {
    count(r.gradient_bytes, p.grad());  // none after backward, unless a user set one
    r.parameters += p.numel();
  }
  for (const auto& [key, t] : s.inner->state_dict())
    if (!is_scalar(t)) count(r.optimizer_state_bytes, t);  // Adam's steps are not tensors
  for (const Bucket& b : s.buckets) count(r.gathered_bytes, b.gathered);
  r.peak_gathered_bytes = s.peak_gathered_bytes;
  for (const Piece& piece : s.pieces) r.owned_parameters += piece.numel;
  r.buckets = static_cast<int64_t>(s.buckets.size());
  for (const Bucket& b : s.buckets)
    r.largest_bucket_bytes = std::max<int64_t>(
        r.largest_bucket_bytes,
        b.chunk * s.size * static_cast<int64_t>(dtype_size(s.flats[b.flat].dtype)));
  return r;
}

}  // namespace stoke::dist
