#include "quant/quantizer.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <regex>

#include "model/safetensors.h"
#include "quant/affine.h"
#include "util/json.h"

namespace sluice::quant {
namespace {

constexpr uint64_t kBlockBytes = 16u << 20;  // source bytes converted per step

bool float_dtype(DType d) { return d == DType::kF32 || d == DType::kF16 || d == DType::kBF16; }

// Tells the kernel the pages of a consumed source range can go (they stay in the file).
void release_pages(const std::byte* p, uint64_t bytes) {
  const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  uintptr_t begin = (reinterpret_cast<uintptr_t>(p) + page - 1) & ~(page - 1);
  uintptr_t end = (reinterpret_cast<uintptr_t>(p) + bytes) & ~(page - 1);
  if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

struct Job {
  const TensorInfo* source = nullptr;
  bool quantize = false;
  QuantForm form;
  DType scale_dtype = DType::kBF16;
};

}  // namespace

bool router_weight(const std::string& name) {
  return name.ends_with(".mlp.gate.weight") || name.ends_with(".block_sparse_moe.gate.weight") || name.ends_with(".router.proj.weight") ||
         name.ends_with(".mlp.shared_expert_gate.weight");
}

Result<QuantizeSummary> quantize_model(const QuantizeOptions& o) {
  if (!supported_bits(o.form.bits)) return make_error("--bits must be one of 2, 3, 4, 5, 6, 8");
  if (!supported_group(o.form.group_size)) return make_error("--group-size must be 32, 64 or 128");
  std::vector<std::regex> keep;
  for (const auto& k : o.keep) {
    try {
      keep.emplace_back(k, std::regex::ECMAScript);
    } catch (const std::regex_error& e) {
      return make_error("--keep '" + k + "' is not a valid regular expression: " + e.what());
    }
  }
  auto config = json::parse_file(o.input / "config.json");
  if (!config) return config.error();
  if (!config->IsObject()) return make_error((o.input / "config.json").string() + ": not a JSON object");
  if (json::member(*config, "quantization"))
    return make_error(o.input.string() + " is already quantized (its config.json has a 'quantization' block)");
  auto set = SafetensorsSet::open_dir(o.input);
  if (!set) return set.error();
  std::error_code ec;
  if (std::filesystem::equivalent(o.input, o.output, ec)) return make_error("--out must differ from --model");

  // Gemma 4 stores its experts as stacked output-major matrices named without ".weight"
  // (experts.gate_up_proj [E, 2F, H], experts.down_proj [E, H, F]): they quantize like any weight, under
  // the name + ".weight" the expert layout reads quantized. (gpt-oss's fused experts are input-major, and
  // stay as they are.)
  const rapidjson::Value* model_type = json::member(*config, "model_type");
  const bool gemma4 = model_type && model_type->IsString() && std::string_view(model_type->GetString()) == "gemma4_text";
  auto stacked_experts = [&](const std::string& name) {
    return gemma4 && (name.ends_with(".experts.gate_up_proj") || name.ends_with(".experts.down_proj"));
  };

  // Plan every output tensor first: the writer needs the whole layout before the first byte.
  std::vector<Job> jobs;
  std::vector<TensorPlan> plan;
  std::map<std::string, QuantForm> overrides;
  QuantizeSummary summary;
  for (const auto& [name, t] : set->tensors()) {
    if (t.name.ends_with(".scales") || t.name.ends_with(".biases"))
      return make_error("tensor '" + name + "': the input looks quantized already");
    Job job;
    job.source = &t;
    const bool kept_by_pattern = std::any_of(keep.begin(), keep.end(), [&](const std::regex& r) { return std::regex_search(name, r); });
    const bool experts = stacked_experts(name);
    job.quantize = float_dtype(t.dtype) && t.shape.size() >= 2 && (name.ends_with(".weight") || experts) && !kept_by_pattern &&
                   t.shape.back() > 0 && t.shape.back() % o.form.group_size == 0;
    const std::string module = experts ? name : name.substr(0, name.size() - std::min<std::size_t>(name.size(), 7));
    job.form = o.form;
    if (job.quantize && router_weight(name)) {
      job.form.bits = 8;
      overrides[module] = job.form;
    }
    job.scale_dtype = t.dtype;
    summary.input_bytes += t.bytes;
    if (!job.quantize) {
      plan.push_back({name, t.dtype, t.shape});
      ++summary.kept;
    } else {
      std::vector<int64_t> packed = t.shape, params = t.shape;
      packed.back() = t.shape.back() * job.form.bits / 32;
      params.back() = t.shape.back() / job.form.group_size;
      plan.push_back({module + ".weight", DType::kU32, packed});
      plan.push_back({module + ".scales", t.dtype, params});
      plan.push_back({module + ".biases", t.dtype, params});
      ++summary.quantized;
      summary.quantized_params += static_cast<uint64_t>(t.numel());
    }
    jobs.push_back(job);
  }
  for (const auto& p : plan) summary.output_bytes += p.bytes();
  auto writer = SafetensorsWriter::create(o.output, std::move(plan), o.max_shard_bytes);
  if (!writer) return writer.error();

  ProgressBar progress(summary.input_bytes, o.quiet);
  uint64_t done = 0;
  std::vector<float> rowf;
  std::vector<uint32_t> words;
  std::vector<std::byte> store;
  for (const Job& job : jobs) {
    const TensorInfo& t = *job.source;
    if (!job.quantize) {
      for (uint64_t off = 0; off < t.bytes; off += kBlockBytes) {
        const uint64_t n = std::min<uint64_t>(kBlockBytes, t.bytes - off);
        if (auto s = writer->append({t.data + off, n}); !s) return s.error();
        release_pages(t.data + off, n);
        progress.update(done += n, t.name);
      }
      continue;
    }
    const std::size_t cols = static_cast<std::size_t>(t.shape.back());
    const std::size_t rows = static_cast<std::size_t>(t.numel()) / cols;
    const std::size_t esize = dtype_size(t.dtype);
    const std::size_t groups = cols / job.form.group_size, wpr = cols * job.form.bits / 32;
    std::vector<float> scales(rows * groups), biases(rows * groups);
    rowf.resize(cols);
    const std::size_t rows_per_block = std::max<std::size_t>(1, kBlockBytes / (cols * esize));
    words.resize(rows_per_block * wpr);
    for (std::size_t r0 = 0; r0 < rows; r0 += rows_per_block) {
      const std::size_t nr = std::min(rows_per_block, rows - r0);
      for (std::size_t r = 0; r < nr; ++r) {
        load_as_f32(t.dtype, t.data + (r0 + r) * cols * esize, cols, rowf.data());
        quantize_row(rowf.data(), cols, job.form.bits, job.form.group_size, job.scale_dtype, words.data() + r * wpr,
                     scales.data() + (r0 + r) * groups, biases.data() + (r0 + r) * groups);
      }
      if (auto s = writer->append(std::as_bytes(std::span(words.data(), nr * wpr))); !s) return s.error();
      release_pages(t.data + r0 * cols * esize, nr * cols * esize);
      progress.update(done += nr * cols * esize, t.name);
    }
    store.resize(scales.size() * esize);
    for (const auto* v : {&scales, &biases}) {
      store_as(job.scale_dtype, v->data(), v->size(), store.data());
      if (auto s = writer->append(store); !s) return s.error();
    }
  }
  if (auto s = writer->finish(); !s) return s.error();

  set_quantization(*config, o.form, overrides);
  if (auto s = write_json(*config, o.output / "config.json"); !s) return s.error();
  if (auto c = copy_tokenizer_files(o.input, o.output); !c) return c.error();
  char line[160];
  std::snprintf(line, sizeof(line), "quantized %d tensors, kept %d: %.3f GB -> %.3f GB", summary.quantized, summary.kept,
                summary.input_bytes / 1e9, summary.output_bytes / 1e9);
  progress.finish(line);
  return summary;
}

}  // namespace sluice::quant
