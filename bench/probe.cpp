// Measures what the machine allows, for bench/machine.py: the single-precision FMA peak and the
// copy bandwidth, each with a chosen number of threads. Built at run time with
// `c++ -O3 -march=native`, so the vector width is the widest the build target has.
//
//   probe info                      -> ISA and vector width (bits) the build chose
//   probe fma THREADS SECONDS       -> "<bits> <GFLOP/s>" per vector width (best of several
//                                      accumulator counts)
//   probe copy THREADS BYTES REPS   -> GB/s (read + write bytes), best and median of REPS
//   probe copy_nt THREADS BYTES REPS   the same with streaming stores
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#if defined(__AVX512F__)
constexpr int kVecBytes = 64;
constexpr const char* kIsa = "avx512";
#elif defined(__AVX__)
constexpr int kVecBytes = 32;
constexpr const char* kIsa = "avx";
#elif defined(__ARM_NEON) || defined(__SSE2__)
constexpr int kVecBytes = 16;
constexpr const char* kIsa = "128-bit";
#else
constexpr int kVecBytes = 4;
constexpr const char* kIsa = "scalar";
#endif
typedef float vf __attribute__((vector_size(kVecBytes)));
// On AVX-512 builds the 256-bit width is measured too: some cores run it at a higher clock.
typedef float vf8 __attribute__((vector_size(32)));
template <typename V>
constexpr int lanes() {
  return sizeof(V) / sizeof(float);
}

using Clock = std::chrono::steady_clock;
static double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

volatile float g_sink;  // keeps the accumulators alive

// NACC independent dependency chains hide the FMA latency (latency x ports chains are needed).
template <typename V, int NACC>
double fma_flops(long iters, float mul, float add) {
  constexpr int kLanes = lanes<V>();
  V acc[NACC];
  V a, b;
  for (int l = 0; l < kLanes; ++l) {
    a[l] = mul;
    b[l] = add;
  }
  for (int i = 0; i < NACC; ++i)
    for (int l = 0; l < kLanes; ++l) acc[i][l] = 1.0f + 1e-3f * (i + l);
  for (long it = 0; it < iters; ++it) {
#pragma GCC unroll 32
    for (int i = 0; i < NACC; ++i) acc[i] = acc[i] * a + b;  // contracted to one FMA
  }
  float s = 0;
  for (int i = 0; i < NACC; ++i)
    for (int l = 0; l < kLanes; ++l) s += acc[i][l];
  g_sink = s;
  return 2.0 * iters * NACC * kLanes;
}

template <typename V, int NACC>
double fma_rate(int threads, double secs, float mul, float add) {
  // Calibrate the iteration count on one thread, then run all threads together.
  long iters = 1 << 16;
  for (;;) {
    auto t0 = Clock::now();
    fma_flops<V, NACC>(iters, mul, add);
    double dt = seconds_since(t0);
    if (dt > 0.02) {
      iters = static_cast<long>(iters * (secs / dt)) + 1;
      break;
    }
    iters *= 4;
  }
  std::vector<std::thread> pool;
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  double total = 0;
  std::vector<double> flops(threads);
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      ready++;
      while (!go.load()) {
      }
      flops[t] = fma_flops<V, NACC>(iters, mul, add);
    });
  while (ready.load() < threads) {
  }
  auto t0 = Clock::now();
  go = true;
  for (auto& th : pool) th.join();
  double dt = seconds_since(t0);
  for (double f : flops) total += f;
  return total / dt * 1e-9;
}

template <typename V>
double fma_best(int threads, double secs, float mul, float add) {
  // Two FMA ports x 4-cycle latency need 8 chains; more cover longer latencies. 32-register
  // ISAs can hold more accumulators without spilling.
  double best = 0;
#if defined(__AVX512F__) || defined(__aarch64__)
  best = std::max(best, fma_rate<V, 12>(threads, secs, mul, add));
  best = std::max(best, fma_rate<V, 20>(threads, secs, mul, add));
#else
  best = std::max(best, fma_rate<V, 8>(threads, secs, mul, add));
  best = std::max(best, fma_rate<V, 12>(threads, secs, mul, add));
#endif
  return best;
}

// Prints one line per vector width: "<bits> <GFLOP/s>".
static int cmd_fma(int threads, double secs, float mul, float add) {
  std::printf("%d %.3f\n", kVecBytes * 8, fma_best<vf>(threads, secs, mul, add));
#if defined(__AVX512F__)
  std::printf("%d %.3f\n", 256, fma_best<vf8>(threads, secs, mul, add));
#endif
  return 0;
}

#if defined(__AVX512F__) || defined(__AVX__) || defined(__SSE2__)
#include <immintrin.h>
#endif

// Copy with non-temporal (streaming) stores: no read-for-ownership of the destination, the way
// memcpy copies buffers larger than its threshold (which glibc derives from the L3 size, and a
// VM may report a huge L3). Both kinds are measured; the faster is what the hardware allows.
static void copy_nt(char* d, const char* s, long n) {
  long i = 0;
#if defined(__AVX512F__)
  for (; i + 64 <= n; i += 64)
    _mm512_stream_ps(reinterpret_cast<float*>(d + i),
                     _mm512_load_ps(reinterpret_cast<const float*>(s + i)));
#elif defined(__AVX__)
  for (; i + 32 <= n; i += 32)
    _mm256_stream_ps(reinterpret_cast<float*>(d + i),
                     _mm256_load_ps(reinterpret_cast<const float*>(s + i)));
#elif defined(__SSE2__)
  for (; i + 16 <= n; i += 16)
    _mm_stream_ps(reinterpret_cast<float*>(d + i), _mm_load_ps(reinterpret_cast<const float*>(s + i)));
#endif
  if (i < n) std::memcpy(d + i, s + i, n - i);
#if defined(__SSE2__) || defined(__AVX__)
  _mm_sfence();
#endif
}

static int cmd_copy(int threads, long bytes, int reps, bool nt) {
  bytes = (bytes / (64L * threads)) * 64L * threads;
  char* src = static_cast<char*>(std::aligned_alloc(4096, bytes + 4096));
  char* dst = static_cast<char*>(std::aligned_alloc(4096, bytes + 4096));
  if (!src || !dst) return 2;
  long chunk = bytes / threads;
  auto run = [&](bool init) {
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t)
      pool.emplace_back([&, t] {
        char* s = src + t * chunk;
        char* d = dst + t * chunk;
        if (init) {  // first touch by the thread that will copy this chunk
          std::memset(s, t + 1, chunk);
          std::memset(d, 0, chunk);
        } else if (nt) {
          copy_nt(d, s, chunk);
        } else {
          std::memcpy(d, s, chunk);
        }
      });
    for (auto& th : pool) th.join();
  };
  run(true);
  run(false);  // warm-up
  std::vector<double> rates;
  for (int r = 0; r < reps; ++r) {
    auto t0 = Clock::now();
    run(false);
    rates.push_back(2.0 * bytes / seconds_since(t0) * 1e-9);
  }
  g_sink = dst[bytes / 2];
  std::sort(rates.begin(), rates.end());
  std::printf("%.3f %.3f\n", rates.back(), rates[rates.size() / 2]);
  std::free(src);
  std::free(dst);
  return 0;
}

int main(int argc, char** argv) {
  if (argc >= 2 && !std::strcmp(argv[1], "info")) {
    std::printf("%s %d\n", kIsa, kVecBytes * 8);
    return 0;
  }
  if (argc >= 4 && !std::strcmp(argv[1], "fma")) {
    // The constants come from the command line so the compiler cannot fold the loop.
    float mul = argc >= 5 ? static_cast<float>(std::atof(argv[4])) : 0.9999999f;
    float add = argc >= 6 ? static_cast<float>(std::atof(argv[5])) : 1e-7f;
    return cmd_fma(std::atoi(argv[2]), std::atof(argv[3]), mul, add);
  }
  if (argc >= 5 && (!std::strcmp(argv[1], "copy") || !std::strcmp(argv[1], "copy_nt")))
    return cmd_copy(std::atoi(argv[2]), std::atol(argv[3]), std::atoi(argv[4]),
                    !std::strcmp(argv[1], "copy_nt"));
  std::fprintf(stderr, "usage: probe info | fma THREADS SECONDS | copy[_nt] THREADS BYTES REPS\n");
  return 1;
}
