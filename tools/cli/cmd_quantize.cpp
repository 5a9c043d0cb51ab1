// sluice quantize: a Hugging Face folder (F32/F16/BF16) → an MLX affine-quantized folder.
#include <iostream>

#include "commands.h"
#include "model_source.h"
#include "model_options.h"
#include "quant/quantizer.h"

namespace sluice::cli {

int run_quantize(const Args& args) {
  quant::QuantizeOptions o;
  std::string in, out;
  double shard_gb = 5.0;
  po::options_description desc("quantize options");
  desc.add_options()
      ("help", "this help")
      ("model", po::value(&in)->required(), "input folder (safetensors in F32, F16 or BF16, config.json, tokenizer)")
      ("out", po::value(&out)->required(), "output folder (created)")
      ("bits", po::value(&o.form.bits)->default_value(4), "bits per weight: 2, 3, 4, 5, 6 or 8")
      ("group-size", po::value(&o.form.group_size)->default_value(64), "values per scale/bias group: 32, 64 or 128")
      ("keep", po::value(&o.keep)->composing(), "regex: matching tensors stay unquantized (repeatable)")
      ("shard-gb", po::value(&shard_gb)->default_value(5.0), "largest output file in GB")
      ("quiet", po::bool_switch(&o.quiet), "no progress bar");
  po::variables_map vm;
  if (int rc = parse_or_exit("quantize", args, desc, vm, "--model IN --out OUT [--bits B] [--group-size G] [--keep PATTERN]"); rc >= 0)
    return rc;
  auto model = resolve_model_arg("quantize", in);
  if (!model) return 1;
  o.input = model->dir;
  o.output = out;
  o.max_shard_bytes = static_cast<uint64_t>(shard_gb * 1e9);
  auto r = quant::quantize_model(o);
  if (!r) {
    std::cerr << "\nsluice quantize: " << r.message() << "\n";
    return 1;
  }
  return 0;
}

}  // namespace sluice::cli
