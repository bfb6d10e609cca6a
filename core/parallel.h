// The project's one thread pool. Every parallel CPU loop in stoke runs here, and OpenBLAS is kept
// single-threaded inside it (ops/cpu/gemm splits large GEMMs over the pool), so the cores have one
// owner and are never oversubscribed. Work is split into static, contiguous chunks whose bounds
// depend only on the range, the grain and the thread count.
#pragma once

#include <cstdint>
#include <functional>

namespace stoke {

// Number of threads parallel loops use (the caller plus the pool's workers). Defaults to
// STOKE_NUM_THREADS if set, else the hardware concurrency.
int num_threads();
// Resizes the pool (n >= 1). Not to be called from inside a parallel loop.
void set_num_threads(int n);
// True on a pool worker or on the caller while it runs its share of a parallel loop.
bool in_parallel_region();

// Number of chunks parallel_for would use for [0, n) with this grain (>= 1 when n > 0).
int64_t parallel_chunk_count(int64_t n, int64_t grain);

// Runs f(chunk, begin, end) over contiguous chunks covering [begin, end), in parallel. Chunks with
// the same index always get the same range for a given thread count. Nested calls run serially.
// The first exception thrown by a chunk is rethrown in the caller after all chunks finished.
void parallel_chunks(int64_t begin, int64_t end, int64_t grain,
                     const std::function<void(int64_t chunk, int64_t b, int64_t e)>& f);

// Runs f(b, e) over contiguous sub-ranges of [begin, end), in parallel; ranges below `grain`
// elements run on the calling thread.
inline void parallel_for(int64_t begin, int64_t end, int64_t grain,
                         const std::function<void(int64_t b, int64_t e)>& f) {
  parallel_chunks(begin, end, grain, [&](int64_t, int64_t b, int64_t e) { f(b, e); });
}

}  // namespace stoke
