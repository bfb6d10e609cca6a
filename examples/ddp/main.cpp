// examples/ddp: data-parallel training under mpirun, one process per rank.
//
//   mpirun -np 2 build/examples/stoke-example-ddp [--data DIR] [--limit-train N] [--epochs N]
//
// Each rank builds the same model (DistributedDataParallel broadcasts rank 0's weights), reads its
// own shard of every epoch through a DistributedSampler, and after backward() holds the gradients
// averaged over all ranks, so the optimizers step alike and the replicas stay equal. As in
// PyTorch: wrap the model, shard the data, call set_epoch, and let rank 0 do the printing.
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "stoke/stoke.h"

using namespace stoke;

int main(int argc, char** argv) {
  std::string dir = "/usr/share/datasets/fashion-mnist";
  int64_t limit = 0, epochs = 1;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--data")
      dir = value;
    else if (flag == "--limit-train")
      limit = std::atoll(value.c_str());
    else if (flag == "--epochs")
      epochs = std::atoll(value.c_str());
    else
      return std::fprintf(stderr, "ddp: unknown flag %s\n", flag.c_str()), 2;
  }
  try {
    dist::MpiCommunicator comm;  // MPI_COMM_WORLD: this process's rank among mpirun's
    const int rank = comm.rank(), world = comm.size();
    set_num_threads(1);  // one core per rank (a 2-core machine running 2 ranks)

    auto train_set = std::make_shared<data::IdxImageDataset>(
        dir, data::IdxImageOptions{.train = true, .limit = limit});
    // Every rank shuffles the same permutation of (seed, epoch) and takes positions
    // rank, rank + world, ...: disjoint shards that together cover the epoch.
    auto sampler = std::make_shared<data::DistributedSampler>(
        train_set->size(),
        data::DistributedSamplerOptions{.rank = rank, .world_size = world, .seed = 1});
    // 64 images per rank and step: the global batch is 64 * world.
    data::DataLoader loader(train_set, sampler, {.batch_size = 64, .workers = 1});

    manual_seed(static_cast<uint64_t>(rank));  // different on purpose: DDP makes them equal
    auto model = nn::models::make_model("lenet5");
    dist::DistributedDataParallel ddp(model, comm);
    nn::optim::SGD opt(model->parameters(), {.lr = 0.05, .momentum = 0.9});
    const data::NormalizeOptions norm{.mean = {0.2860f}, .std = {0.3530f}};

    for (int64_t epoch = 0; epoch < epochs; ++epoch) {
      loader.set_epoch(epoch);  // reshuffles the sampler's shards
      Tensor loss_sum = zeros({1});
      int64_t steps = 0;
      while (auto batch = loader.next()) {
        Tensor loss = cross_entropy(ddp(data::normalize(batch->images, norm)), batch->labels);
        opt.zero_grad();
        loss.backward();  // returns with the gradients averaged over the ranks
        opt.step();
        loss_sum = add(loss_sum, loss.detach().reshape({1}));
        ++steps;
      }
      // The mean loss over every rank's steps: one allreduce at the end of the epoch.
      comm.allreduce(loss_sum);
      if (rank == 0)
        std::printf("epoch %lld: mean loss %.4f over %d ranks x %lld steps\n",
                    static_cast<long long>(epoch + 1),
                    loss_sum.item() / static_cast<double>(world * steps), world,
                    static_cast<long long>(steps));
    }

    // The replicas are equal: the largest checksum of the parameters over the ranks is also the
    // smallest (the MAX allreduce of the checksum and of its negative).
    double checksum = 0;
    for (const Tensor& p : model->parameters()) checksum += sum(p.detach().to(DType::f64)).item();
    Tensor hi = full({1}, checksum, {.dtype = DType::f64});
    Tensor neg = full({1}, -checksum, {.dtype = DType::f64});
    comm.allreduce(hi, dist::ReduceOp::max);
    comm.allreduce(neg, dist::ReduceOp::max);
    const bool equal = hi.item() == -neg.item();
    if (rank == 0)
      std::printf("replicas %s (parameter checksum %.9g)\n", equal ? "equal" : "DIFFER", checksum);
    return equal ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ddp: %s\n", e.what());
    return 1;
  }
}
