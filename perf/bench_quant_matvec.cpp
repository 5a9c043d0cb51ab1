// bench_quant_matvec: a backend's matmul on one weight matrix, through the plugin ABI, for each
// weight form: decode (1 activation row) and --prefill rows (a batch of decode rows, or a prefill). Prints values per second, the
// weight bytes streamed per second in decode, and decode values per cycle of CPU time consumed (process
// CPU time, so other processes sharing the machine do not distort it; pool threads that spin count;
// meaningless for a GPU backend, whose work is timed by waiting for its last result).
//
//   bench_quant_matvec [--backend cpu|opencl|opencl:P:D] [--backend-options OPTS] [--rows 4096] [--cols 4096]
//                      [--threads 2] [--prefill 512] [--reps 20] [--bits 0,8,4,3,2,5,6] [--group 64] [--plugin-dir DIR]
// --bits picks the forms (0 = bf16); --backend-options goes to the backend (OpenCL: "tune.q4_team=64 ...").
#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "plugin/backend_handle.h"
#include "plugin/op_calls.h"
#include "plugin/plugin_registry.h"
#include "quant/affine.h"

using namespace sluice;

int main(int argc, char** argv) {
  uint32_t rows = 4096, cols = 4096, threads = 2, prefill = 512;
  int reps = 20;
  double ghz = 2.45;  // this machine's nominal clock (/proc/cpuinfo)
  std::string plugin_dir, backend = "cpu", backend_options;
  std::vector<int> forms = {0, 8, 4, 3, 2, 5, 6};
  int group = 64;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : "0"; };
    if (a == "--rows") rows = std::stoul(next());
    else if (a == "--cols") cols = std::stoul(next());
    else if (a == "--threads") threads = std::stoul(next());
    else if (a == "--prefill") prefill = std::stoul(next());
    else if (a == "--reps") reps = std::stoi(next());
    else if (a == "--ghz") ghz = std::stod(next());
    else if (a == "--plugin-dir") plugin_dir = next();
    else if (a == "--backend") backend = next();
    else if (a == "--backend-options") backend_options = next();
    else if (a == "--group") group = std::stoi(next());
    else if (a == "--bits") {
      forms.clear();
      std::string list = next();
      for (std::size_t p = 0; p <= list.size();) {
        const std::size_t q = std::min(list.find(',', p), list.size());
        forms.push_back(std::stoi(list.substr(p, q - p)));
        p = q + 1;
      }
    }
    else {
      std::fprintf(stderr, "bench_quant_matvec: unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  PluginRegistry registry;
  if (plugin_dir.empty())
    for (const auto& d : PluginRegistry::default_dirs()) registry.scan(d);
  else
    registry.scan(plugin_dir);
  const std::string plugin = backend.substr(0, backend.find(':'));
  const std::string device = backend.find(':') == std::string::npos ? "" : backend.substr(backend.find(':') + 1);
  const auto* rec = registry.find(SL_PLUGIN_BACKEND, plugin);
  if (!rec) {
    std::fprintf(stderr, "bench_quant_matvec: no %s backend plugin found\n", plugin.c_str());
    return 1;
  }
  auto be = BackendHandle::open(static_cast<const sl_backend_api*>(rec->descriptor->api), plugin, device, threads,
                                backend_options);
  if (!be) {
    std::fprintf(stderr, "bench_quant_matvec: %s\n", be.message().c_str());
    return 1;
  }
  OpCalls ops(**be);
  std::mt19937 rng(1);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> w(std::size_t(rows) * cols), x(std::size_t(std::max(prefill, 4u)) * cols);
  for (auto& v : w) v = nd(rng);
  for (auto& v : x) v = nd(rng);
  auto xb = (*be)->alloc(x.size() * 4);
  auto ob = (*be)->alloc(std::size_t(std::max(prefill, 4u)) * rows * 4);
  if (!xb || !ob) return 1;
  (void)(*be)->upload(*xb, 0, x.data(), x.size() * 4);

  std::printf(
      "| form | decode Gvalues/s | decode GB/s | values/CPU cycle @%.2f GHz | %u rows: G multiply-adds/s | %u rows: "
      "multiply-adds/CPU cycle | %u rows: µs a product |\n|---|---|---|---|---|---|---|\n",
      ghz, prefill, prefill, prefill);
  for (int bits : forms) {
    std::vector<std::byte> data, scales, biases;
    sl_weight sw{};
    sw.struct_size = sizeof(sw);
    sw.rows = rows;
    sw.cols = cols;
    if (bits == 0) {
      data.resize(w.size() * 2);
      quant::store_as(DType::kBF16, w.data(), w.size(), data.data());
      sw.dtype = SL_DTYPE_BF16;
    } else {
      const std::size_t wpr = std::size_t(cols) * bits / 32, groups = cols / group;
      std::vector<uint32_t> words(rows * wpr);
      std::vector<float> s(rows * groups), b(rows * groups);
      for (uint32_t r = 0; r < rows; ++r)
        quant::quantize_row(w.data() + std::size_t(r) * cols, cols, bits, group, DType::kBF16, words.data() + r * wpr,
                            s.data() + r * groups, b.data() + r * groups);
      data.resize(words.size() * 4);
      std::memcpy(data.data(), words.data(), data.size());
      scales.resize(s.size() * 2);
      biases.resize(b.size() * 2);
      quant::store_as(DType::kBF16, s.data(), s.size(), scales.data());
      quant::store_as(DType::kBF16, b.data(), b.size(), biases.data());
      sw.dtype = SL_DTYPE_U32;
      sw.bits = bits;
      sw.group_size = group;
      sw.scale_dtype = SL_DTYPE_BF16;
    }
    auto db = (*be)->wrap_host(data.data(), data.size());
    auto sb = bits ? (*be)->wrap_host(scales.data(), scales.size()) : (*be)->alloc(8);
    auto bb = bits ? (*be)->wrap_host(biases.data(), biases.size()) : (*be)->alloc(8);
    if (!db || !sb || !bb) return 1;
    sw.data = db->get();
    if (bits) {
      sw.scales = sb->get();
      sw.biases = bb->get();
    }
    auto cpu_now = [] {
      timespec ts;
      clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
      return ts.tv_sec + ts.tv_nsec * 1e-9;
    };
    double cpu_s = 0;
    auto run = [&](uint32_t n, int r) {
      sl_error err{};
      const double c0 = cpu_now();
      auto t = std::chrono::steady_clock::now();
      for (int i = 0; i < r; ++i)
        if (ops.matmul(xb->get(), n, &sw, nullptr, ob->get(), &err) != SL_OK) {
          std::fprintf(stderr, "matmul: %s\n", err.message);
          std::exit(1);
        }
      float last = 0;  // waits for the device's queue: its results come back in order
      (void)(*be)->download(*ob, 0, &last, sizeof(last));
      cpu_s = (cpu_now() - c0) / r;
      return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count() / r;
    };
    run(1, 2);
    double best = 1e9;
    double best_cpu = 1e9;
    for (int k = 0; k < 3; ++k) {
      best = std::min(best, run(1, reps));
      best_cpu = std::min(best_cpu, cpu_s);
    }
    const double values = double(rows) * cols;
    const double bytes = data.size() + scales.size() + biases.size();
    double pbest = 1e9, pbest_cpu = 1e9;
    // A batch of decode rows (up to 64) is timed over `reps` products like decode; a prefill once.
    if (prefill >= 2)
      for (int k = 0; k < 3; ++k) {
        pbest = std::min(pbest, run(prefill, prefill <= 64 ? reps : 1));
        pbest_cpu = std::min(pbest_cpu, cpu_s);
      }
    std::printf("| %s | %.2f | %.2f | %.2f | %.1f | %.1f | %.1f |\n", bits ? (std::to_string(bits) + "-bit g" + std::to_string(group)).c_str() : "bf16",
                values / best / 1e9, bytes / best / 1e9, values / best_cpu / (ghz * 1e9),
                prefill >= 2 ? values * prefill / pbest / 1e9 : 0.0,
                prefill >= 2 ? values * prefill / pbest_cpu / (ghz * 1e9) : 0.0, prefill >= 2 ? pbest * 1e6 : 0.0);
  }
  return 0;
}
