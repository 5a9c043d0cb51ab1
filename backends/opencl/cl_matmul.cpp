// Matrix products out = x · Wᵀ (+ bias) with weights [rows = out, cols = in] in f32/f16/bf16 or
// affine-quantized (1..8 bits). A few activation rows (decode): our matvec kernels stream each weight
// row once, dequantizing in registers — decode is bound by reading the weights. More rows (prefill):
// blocks of weight rows are dequantized to float32 in device scratch and multiplied with CLBlast's
// GEMM (our tiled kernel if CLBlast fails on the device) — prefill is bound by arithmetic. On sm_80+
// NVIDIA devices 4- and 8-bit weights skip the scratch: kernels_cl/gemm_mma.cl multiplies them on
// tensor cores (f16 inputs, f32 sums), dequantizing as it stages them.
// Weights larger than one device allocation are processed in row segments that each fit in one.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <clblast.h>

#include "cl_backend.h"
#include "cl_fusion.h"
#include "cl_matmul_path.h"
#include "util/mxfp4.h"

namespace sluice::ocl {
namespace {

constexpr uint32_t kMatvecRowsPerGroup = 128 / 32;  // WG / TEAM
constexpr uint64_t kScratchBytes = 64ull << 20;   // float32 weight block for one GEMM

// The gate/up/activation launch's work-groups (kernels_cl/matvec.cl): of 128 work-items, four row
// pairs each, the last group of a 32-row block to finish writing the block's 15-bit form for down
// (matvec_q4_dp4a_glu_blocks) — or one group of 1024 a block (matvec_q4_dp4a_glu) with
// tuning glu_blocks = 0 or the backend option `glu-whole-block` (measuring; the tests compare).
// The backend option "no-glu-join" keeps the products and the activation apart (cl_fusion.h).
// On the H100 small groups measured +1.5 % decode (perf/results/fused_decode_gpu/run42, run43): a
// work-group of 1024 holds a compute unit until its slowest warp is done, and the last of the launch's
// 3.4 waves of them ran on a part of the GPU (perf/bench_cl_bandwidth.cpp's row patterns: 66 MB
// read as a warp a row at 2.4 TB/s in groups of 128, 2.0 in groups of 1024).
bool glu_in_groups(const sl_backend* be) {
  const bool off = !be->tuning.glu_blocks;
  return !off && be->caps.sm >= 70 && be->options.find("glu-whole-block") == std::string::npos;  // fence.acq_rel
}

// n counters of finished work-groups a 32-row block, zero: each launch leaves the ones it used at zero.
cl::Buffer& block_counts(sl_backend* be, uint64_t n) {
  if (be->block_counts.bytes < n * 4) {
    cl::Buffer& b = be->block_counts.at_least(be->context, n * 4);
    be->queue.enqueueFillBuffer(b, cl_uint(0), 0, n * 4);
  }
  return be->block_counts.buffer;
}

struct Segment {
  uint32_t r0, rows;
  DevPtr data, scales, biases;  // MXFP4: no biases (data's range stands in, unread)
};

bool is_mxfp4(const sl_weight* w) { return mxfp4::is_mxfp4(*w); }

uint64_t row_bytes(const sl_weight* w) {
  if (w->bits) return uint64_t(w->cols) * w->bits / 8;
  return uint64_t(w->cols) * (w->dtype == SL_DTYPE_F32 ? 4 : 2);
}

std::vector<Segment> segments(sl_backend* be, const sl_weight* w) {
  const bool mx = is_mxfp4(w);
  const uint64_t rb = row_bytes(w);
  const uint64_t groups = w->bits ? w->cols / w->group_size : 0;
  const uint64_t sb = mx ? 1 : w->scale_dtype == SL_DTYPE_F32 ? 4 : 2;
  const uint64_t param_limit = !w->bits ? w->data->chunk_bytes : mx ? w->scales->chunk_bytes : std::min(w->scales->chunk_bytes, w->biases->chunk_bytes);
  const uint64_t limit = std::min(w->data->chunk_bytes, param_limit);
  const uint64_t per = std::max<uint64_t>(1, std::min<uint64_t>(w->rows, limit / std::max<uint64_t>(rb, groups * sb)));
  std::vector<Segment> out;
  for (uint64_t r0 = 0; r0 < w->rows; r0 += per) {
    Segment s;
    s.r0 = static_cast<uint32_t>(r0);
    s.rows = static_cast<uint32_t>(std::min<uint64_t>(per, w->rows - r0));
    s.data = read_range(be, w->data, w->offset + r0 * rb, s.rows * rb, 4);
    if (w->bits) {
      s.scales = read_range(be, w->scales, w->scales_offset + r0 * groups * sb, s.rows * groups * sb, sb);
      s.biases = mx ? s.data : read_range(be, w->biases, w->biases_offset + r0 * groups * sb, s.rows * groups * sb, sb);
    }
    out.push_back(s);
  }
  return out;
}

}  // namespace

// The 15-bit form's buffers of pair `slot` (Forms), grown to hold cols values.
std::pair<cl::Buffer&, cl::Buffer&> form_pair(sl_backend* be, uint32_t slot, uint64_t cols) {
  Scratch& q = slot ? be->matvec_x8_alt : be->matvec_x8;
  Scratch& b = slot ? be->matvec_x8_alt_blocks : be->matvec_x8_blocks;
  return {q.at_least(be->context, cols * 2), b.at_least(be->context, cols / 32 * 8)};
}

namespace {

// One weight's share of a launch of products of one x (q/k/v, gate/up; one product is one part): its
// segment, its output and that output's row length (the batch kernels'), its bias — the one-row
// kernels' Q4_PARTS_ARGS (kernels_cl/matvec.cl), the batch kernels' BATCH_PARTS_ARGS (common.cl).
struct LaunchPart {
  Segment seg;
  cl::Buffer out;
  uint32_t out_stride = 0;
  DevPtr bias;
  bool has_bias = false;
};

// A product's bias as the kernels read it (none: out's buffer, unread).
DevPtr bias_range(sl_backend* be, const sl_weight* bias, const sl_buffer* out) {
  if (!bias) return DevPtr{single(out), 0};  // unread
  const uint64_t sb = bias->dtype == SL_DTYPE_F32 ? 4 : 2;
  return read_range(be, bias->data, bias->offset, uint64_t(bias->cols) * sb, sb);
}

// The parts of one launch for products of one x, or false where the weights do not allow one: each in
// one segment, their words, scales and biases each in one device buffer, the biases (if any) of one
// form (bias_dtype). Shapes are the caller's to check.
bool launch_parts(sl_backend* be, uint32_t count, const sl_weight* const* ws, const sl_weight* const* biases,
                  sl_buffer* const* outs, std::vector<LaunchPart>& parts, uint32_t& bias_dtype) {
  bias_dtype = 0;
  bool any_bias = false;
  for (uint32_t i = 0; i < count; ++i) {
    const sl_weight* w = ws[i];
    auto segs = segments(be, w);
    if (segs.size() != 1) return false;
    const sl_weight* bias = biases ? biases[i] : nullptr;
    if (bias) {
      if (any_bias && bias->dtype != bias_dtype) return false;
      any_bias = true;
      bias_dtype = bias->dtype;
    }
    parts.push_back(LaunchPart{segs[0], single(outs[i]), w->rows, bias_range(be, bias, outs[i]), bias != nullptr});
    const Segment &s = parts.back().seg, &f = parts.front().seg;
    if (s.data.buffer() != f.data.buffer() || s.scales.buffer() != f.scales.buffer() || s.biases.buffer() != f.biases.buffer())
      return false;
  }
  return true;
}

// The alignment in bytes (16, 8 or 4) every part's weight rows share: row starts are multiples of 16 bytes here.
cl_uint parts_alignment(const LaunchPart* parts, uint32_t n_parts) {
  uint64_t at = 0;
  for (uint32_t p = 0; p < n_parts; ++p) at |= parts[p].seg.data.offset;
  return at % 16 == 0 ? 16 : at % 8 == 0 ? 8 : 4;
}

// BATCH_PARTS_ARGS (kernels_cl/common.cl) from argument `a` on, blocks of rows_per_block weight rows;
// returns the launch's blocks.
uint64_t set_batch_parts_args(cl::Kernel& k, cl_uint a, const LaunchPart* parts, uint32_t n_parts, uint32_t rows_per_block,
                              uint32_t bias_dtype) {
  uint64_t blocks = 0;
  cl_uint has_bias = 0;
  for (uint32_t p = 0; p < 3; ++p) {
    const LaunchPart& q = parts[std::min(p, n_parts - 1)];  // absent parts: block_end[p] == block_end[p-1], never read
    if (p < n_parts) {
      blocks += (q.seg.rows + rows_per_block - 1) / rows_per_block;
      has_bias |= q.has_bias ? 1u << p : 0u;
    }
    k.setArg(a++, static_cast<cl_ulong>(q.seg.data.offset));
    k.setArg(a++, static_cast<cl_ulong>(q.seg.scales.offset));
    k.setArg(a++, static_cast<cl_ulong>(q.seg.biases.offset));
    k.setArg(a++, static_cast<cl_uint>(q.seg.rows));
    k.setArg(a++, static_cast<cl_uint>(blocks));
    k.setArg(a++, q.out);
    k.setArg(a++, static_cast<cl_uint>(q.out_stride));
    k.setArg(a++, q.bias.buffer);
    k.setArg(a++, static_cast<cl_ulong>(q.bias.offset));
  }
  k.setArg(a++, has_bias);
  k.setArg(a++, static_cast<cl_uint>(bias_dtype));
  k.setArg(a++, static_cast<cl_uint>(parts[0].seg.r0));
  return blocks;
}

MatmulShape shape_of(uint32_t n_rows, const sl_weight* w) { return {n_rows, w->cols, w->bits, w->group_size, is_mxfp4(w), w->rows}; }

bool q4_decode_form(uint32_t n_rows, const sl_weight* w) {
  return n_rows == 1 && q4_steps_form(shape_of(n_rows, w));
}

// The activation's 15-bit form for the dp4a kernel, or false for the float kernel: a norm step's
// (the launch before wrote it), else the form a producer wrote beside x in this graph (rms_norm,
// add_rms_norm, gated_activation, attention: no launch here), else made here for matrices of 2^24
// weights and more only — on the H100 (perf/results/dp4a_gpu/run1) dp4a lost at 1024×4096 (0.14
// against 0.32 TB/s: the extra launch that rounds x is not repaid), and from 4096×4096 (the o
// projection) it won in the model: decode 214 → 223 tokens/s (perf/results/fused_decode_gpu/run3).
bool dp4a_input(sl_backend* be, const sl_buffer* x, uint32_t cols, uint64_t weights, Forms& forms, const NormStep* step,
                cl::Buffer*& xq, cl::Buffer*& blocks) {
  if (!use_dp4a(be)) return false;
  const int slot = step ? static_cast<int>(step->slot) : forms.find(x, cols);
  if (slot >= 0) {
    auto pair = form_pair(be, static_cast<uint32_t>(slot), cols);
    xq = &pair.first;
    blocks = &pair.second;
    return true;
  }
  // Tuning dp4a_min_log2 = n: from 2^n weights (24).
  const uint32_t min_log2 = be->tuning.dp4a_min_log2;
  if (weights < (uint64_t(1) << min_log2) || !int15_scratch(be, 1, cols, xq, blocks)) return false;
  auto& q = kernel(be, "matvec", "matvec_x_int15");
  q.setArg(0, single(x));
  q.setArg(1, static_cast<cl_uint>(cols));
  q.setArg(2, *xq);
  q.setArg(3, *blocks);
  launch(be, q, cl::NDRange(round_up(cols, 256)), cl::NDRange(256));
  forms.made(0, x, cols);  // later products of the same x reuse it
  return true;
}

// The norm step's arguments (NORM_ARGS in kernels_cl/matvec.cl) for a dp4a product reading x: the
// step's when there is one (x is its output), else none (norm_blocks 0; the buffers are then unread).
void set_norm_args(sl_backend* be, cl::Kernel& k, cl_uint& a, const sl_buffer* x, const NormStep* n) {
  const bool on = n != nullptr;
  const DevPtr w = on ? vector_weight(be, n->weight, n->dim) : DevPtr{single(x), 0};
  k.setArg(a++, on ? be->norm_parts.buffer : single(x));
  k.setArg(a++, static_cast<cl_uint>(on ? n->dim / 32 : 0));
  k.setArg(a++, on ? n->eps : 0.0f);
  k.setArg(a++, single(on ? n->x : x));
  k.setArg(a++, w.buffer);
  k.setArg(a++, static_cast<cl_ulong>(w.offset));
  k.setArg(a++, static_cast<cl_uint>(on ? n->weight->dtype : 0));
  k.setArg(a++, on ? n->weight_offset : 0.0f);
  k.setArg(a++, single(on ? n->out : x));
}

// Up to three parts of one-row 4-bit products sharing x, in one launch; parts[0].seg.r0 is where
// part 0's rows start in its output. Every part's rows but the last are a multiple of the shape's rows a team.
void q4_decode_launch(sl_backend* be, const sl_buffer* x, const sl_weight* w, const LaunchPart* parts, uint32_t n_parts,
                      bool dp4a, cl::Buffer* xq, cl::Buffer* blocks, uint32_t bias_dtype, const NormStep* step) {
  uint32_t total = 0;
  cl_uint end[3], has_bias = 0;
  for (uint32_t p = 0; p < 3; ++p) {
    if (p < n_parts) {
      total += parts[p].seg.rows;
      has_bias |= parts[p].has_bias ? 1u << p : 0u;
    }
    end[p] = total;
  }
  const Q4Shape shape = q4_shape(be, total, w->cols);
  const uint32_t rows_per_group = 128 / shape.team * shape.rows;
  auto& k = kernel(be, q4_program(shape), dp4a ? "matvec_q4_dp4a" : "matvec_q4_rows");
  const Segment& s0 = parts[0].seg;
  cl_uint a = 0;
  k.setArg(a++, s0.data.buffer);
  k.setArg(a++, static_cast<cl_ulong>(uint64_t(w->cols) * 4 / 32));
  k.setArg(a++, s0.scales.buffer);
  k.setArg(a++, s0.biases.buffer);
  k.setArg(a++, static_cast<cl_uint>(w->scale_dtype));
  k.setArg(a++, static_cast<cl_uint>(w->group_size));
  k.setArg(a++, static_cast<cl_uint>(w->cols));
  k.setArg(a++, parts_alignment(parts, n_parts));
  if (dp4a) {
    k.setArg(a++, *xq);
    k.setArg(a++, *blocks);
  } else {
    k.setArg(a++, single(x));
  }
  for (uint32_t p = 0; p < 3; ++p) {
    const LaunchPart& q = parts[std::min(p, n_parts - 1)];  // absent parts: end[p] == end[p-1], never read
    k.setArg(a++, static_cast<cl_ulong>(q.seg.data.offset));
    k.setArg(a++, static_cast<cl_ulong>(q.seg.scales.offset));
    k.setArg(a++, static_cast<cl_ulong>(q.seg.biases.offset));
    k.setArg(a++, end[p]);
    k.setArg(a++, q.out);
    k.setArg(a++, q.bias.buffer);
    k.setArg(a++, static_cast<cl_ulong>(q.bias.offset));
  }
  k.setArg(a++, has_bias);
  k.setArg(a++, static_cast<cl_uint>(bias_dtype));
  k.setArg(a++, static_cast<cl_uint>(s0.r0));
  if (dp4a) set_norm_args(be, k, a, x, step);
  launch(be, k, cl::NDRange(size_t((total + rows_per_group - 1) / rows_per_group) * 128), cl::NDRange(128));
}

void matvec(sl_backend* be, const sl_buffer* x, uint32_t n_rows, const sl_weight* w, const DevPtr& bias, uint32_t bias_dtype,
            bool has_bias, sl_buffer* out, Forms& forms, const NormStep* step) {
  const bool q4_decode = q4_decode_form(n_rows, w);
  cl::Buffer *xq = nullptr, *blocks = nullptr;
  const bool dp4a = q4_decode && dp4a_input(be, x, w->cols, uint64_t(w->rows) * w->cols, forms, step, xq, blocks);
  if (!dp4a && step) norm_step_finish(be, *step, forms);  // the float kernels read x itself
  if (!dp4a) step = nullptr;
  for (const auto& s : segments(be, w)) {
    const cl::NDRange global(size_t((s.rows + kMatvecRowsPerGroup - 1) / kMatvecRowsPerGroup) * 128), local(128);
    if (w->bits == 0) {
      auto& k = kernel(be, "matvec", "matvec");
      k.setArg(0, s.data.buffer);
      k.setArg(1, static_cast<cl_ulong>(s.data.offset));
      k.setArg(2, static_cast<cl_uint>(w->dtype));
      k.setArg(3, static_cast<cl_uint>(s.rows));
      k.setArg(4, static_cast<cl_uint>(w->cols));
      k.setArg(5, single(x));
      k.setArg(6, static_cast<cl_uint>(n_rows));
      k.setArg(7, single(out));
      k.setArg(8, static_cast<cl_uint>(w->rows));
      k.setArg(9, static_cast<cl_uint>(s.r0));
      k.setArg(10, bias.buffer);
      k.setArg(11, static_cast<cl_ulong>(bias.offset));
      k.setArg(12, static_cast<cl_uint>(bias_dtype));
      k.setArg(13, static_cast<cl_uint>(has_bias));
      launch(be, k, global, local);
    } else if (is_mxfp4(w)) {
      auto& k = kernel(be, "matvec", "matvec_mxfp4");
      k.setArg(0, s.data.buffer);
      k.setArg(1, static_cast<cl_ulong>(s.data.offset));
      k.setArg(2, s.scales.buffer);
      k.setArg(3, static_cast<cl_ulong>(s.scales.offset));
      k.setArg(4, static_cast<cl_uint>(s.rows));
      k.setArg(5, static_cast<cl_uint>(w->cols));
      k.setArg(6, single(x));
      k.setArg(7, static_cast<cl_uint>(n_rows));
      k.setArg(8, single(out));
      k.setArg(9, static_cast<cl_uint>(w->rows));
      k.setArg(10, static_cast<cl_uint>(s.r0));
      k.setArg(11, bias.buffer);
      k.setArg(12, static_cast<cl_ulong>(bias.offset));
      k.setArg(13, static_cast<cl_uint>(bias_dtype));
      k.setArg(14, static_cast<cl_uint>(has_bias));
      launch(be, k, global, local);
    } else if (q4_decode) {
      // Decode's common case: the shape of q4_shape() (kernels_cl/matvec.cl), the float kernel
      // or, on NVIDIA, the dp4a one.
      const LaunchPart part{s, single(out), w->rows, bias, has_bias};
      q4_decode_launch(be, x, w, &part, 1, dp4a, xq, blocks, bias_dtype, step);
    } else {
      auto& k = kernel(be, "matvec", "matvec_quant");
      k.setArg(0, s.data.buffer);
      k.setArg(1, static_cast<cl_ulong>(s.data.offset));
      k.setArg(2, static_cast<cl_uint>(w->bits));
      k.setArg(3, static_cast<cl_ulong>(uint64_t(w->cols) * w->bits / 32));
      k.setArg(4, s.scales.buffer);
      k.setArg(5, static_cast<cl_ulong>(s.scales.offset));
      k.setArg(6, s.biases.buffer);
      k.setArg(7, static_cast<cl_ulong>(s.biases.offset));
      k.setArg(8, static_cast<cl_uint>(w->scale_dtype));
      k.setArg(9, static_cast<cl_uint>(w->group_size));
      k.setArg(10, static_cast<cl_uint>(s.rows));
      k.setArg(11, static_cast<cl_uint>(w->cols));
      k.setArg(12, single(x));
      k.setArg(13, static_cast<cl_uint>(n_rows));
      k.setArg(14, single(out));
      k.setArg(15, static_cast<cl_uint>(w->rows));
      k.setArg(16, static_cast<cl_uint>(s.r0));
      k.setArg(17, bias.buffer);
      k.setArg(18, static_cast<cl_ulong>(bias.offset));
      k.setArg(19, static_cast<cl_uint>(bias_dtype));
      k.setArg(20, static_cast<cl_uint>(has_bias));
      launch(be, k, global, local);
    }
  }
}

// Whether the device runs the batched tensor-core products in this shape: an sm_80+ NVIDIA device with
// PTX on and the shape's program built (on first use; if a build fails, the dp4a and float batch
// kernels serve from then on).
bool batch_mma_device(sl_backend* be, const Q4BatchMmaShape& shape) {
  if (be->batch_mma_state == 0) be->batch_mma_state = be->use_ptx && be->caps.sm >= 80 ? 1 : -1;
  if (be->batch_mma_state != 1) return false;
  try {
    kernel(be, q4_batch_mma_program(shape), "matvec_q4_batch_mma");
    return true;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "opencl: tensor-core batch products unavailable, batches use the dp4a kernel: %s\n", e.what());
    be->batch_mma_state = -1;
    return false;
  }
}

// A batch of decode rows on tensor cores: x's rows as f16 in the kernel's column order with their
// step sums (matvec_batch_mma_pack_x; shared by the products that read the same x), then
// matvec_q4_batch_mma over up to three parts (weights of w's cols, group size and scale form in one
// set of buffers; parts[0].seg.r0 is where part 0's rows start in its output), 16·m_tiles·m_warps
// weight rows a work-group, chunks of 8·n_tiles rows.
void q4_batch_mma_launch(sl_backend* be, const sl_buffer* x, uint32_t n_rows, const sl_weight* w, const Q4BatchMmaShape& shape,
                         const LaunchPart* parts, uint32_t n_parts, uint32_t bias_dtype, Forms& forms) {
  const std::string program = q4_batch_mma_program(shape);
  cl::Buffer& xh = be->batch_x8.at_least(be->context, uint64_t(n_rows) * w->cols * 2);
  cl::Buffer& sums = be->batch_x8_blocks.at_least(be->context, uint64_t(n_rows) * (w->cols / shape.step) * 4);
  if (!forms.holds_batch(x, w->cols, n_rows, shape.step)) {
    auto& pack = kernel(be, program, "matvec_batch_mma_pack_x");
    pack.setArg(0, single(x));
    pack.setArg(1, static_cast<cl_uint>(w->cols));
    pack.setArg(2, static_cast<cl_uint>(n_rows));
    pack.setArg(3, xh);
    pack.setArg(4, sums);
    launch(be, pack, cl::NDRange(round_up(w->cols / 8, 64), n_rows), cl::NDRange(64, 1));  // a word of 8 columns a work-item
    forms.made_batch(x, w->cols, n_rows, shape.step);
  }
  const uint32_t chunks = (n_rows + shape.chunk_rows() - 1) / shape.chunk_rows();
  auto& k = kernel(be, program, "matvec_q4_batch_mma");
  const cl_uint align = parts_alignment(parts, n_parts);
  cl_uint a = 0;
  k.setArg(a++, parts[0].seg.data.buffer);
  k.setArg(a++, static_cast<cl_uint>(align >= 8 ? 8 : 4));
  k.setArg(a++, parts[0].seg.scales.buffer);
  k.setArg(a++, parts[0].seg.biases.buffer);
  k.setArg(a++, static_cast<cl_uint>(w->scale_dtype));
  k.setArg(a++, static_cast<cl_uint>(w->group_size));
  k.setArg(a++, static_cast<cl_uint>(w->cols));
  k.setArg(a++, xh);
  k.setArg(a++, sums);
  k.setArg(a++, static_cast<cl_uint>(n_rows));
  k.setArg(a++, static_cast<cl_uint>(chunks));
  const uint64_t blocks = set_batch_parts_args(k, a, parts, n_parts, shape.rows_per_group(), bias_dtype);
  launch(be, k, cl::NDRange(size_t(blocks * chunks * shape.warps * 32)), cl::NDRange(shape.warps * 32));
}

// A batch of decode rows (one a sequence) by up to three 4-bit weights as parts (as above), without
// tensor cores: matvec_q4_batch (kernels_cl/matvec_batch.cl) reads each weight step once for a chunk
// of rows, the chunks of a block of weight rows consecutive work-groups; on NVIDIA matvec_q4_batch_dp4a
// (the rows' 15-bit forms, shared by the products that read the same x).
void q4_batch_launch(sl_backend* be, const sl_buffer* x, uint32_t n_rows, const sl_weight* w, const LaunchPart* parts,
                     uint32_t n_parts, uint32_t bias_dtype, Forms& forms) {
  const uint32_t chunk = q4_batch_chunk(n_rows, be->tuning), team_rows = q4_batch_team_rows(n_rows, be->tuning);
  const uint32_t chunks = (n_rows + chunk - 1) / chunk, rows_per_group = 128 / 32 * team_rows;
  cl::Buffer *xq = nullptr, *blocks = nullptr;
  const bool dp4a = q4_batch_dp4a(use_dp4a(be), be->tuning) && w->cols % 32 == 0;
  if (dp4a) {  // every row's 15-bit form; buffers of their own, as the one-row pair may hold a form a
               // later product reuses (Forms, slot 0)
    xq = &be->batch_x8.at_least(be->context, uint64_t(n_rows) * w->cols * 2);
    blocks = &be->batch_x8_blocks.at_least(be->context, uint64_t(n_rows) * w->cols / 32 * 8);
  }
  if (dp4a && !forms.holds_batch(x, w->cols, n_rows, Forms::kBatchInt15)) {
    auto& q = kernel(be, "matvec", "matvec_x_int15_rows");
    q.setArg(0, single(x));
    q.setArg(1, static_cast<cl_uint>(w->cols));
    q.setArg(2, *xq);
    q.setArg(3, *blocks);
    launch(be, q, cl::NDRange(round_up(w->cols, 256), n_rows), cl::NDRange(256, 1));
    forms.made_batch(x, w->cols, n_rows, Forms::kBatchInt15);
  }
  auto& k = kernel(be, q4_batch_program(chunk, team_rows), dp4a ? "matvec_q4_batch_dp4a" : "matvec_q4_batch");
  cl_uint a = 0;
  k.setArg(a++, parts[0].seg.data.buffer);
  k.setArg(a++, static_cast<cl_ulong>(uint64_t(w->cols) * 4 / 32));
  k.setArg(a++, parts[0].seg.scales.buffer);
  k.setArg(a++, parts[0].seg.biases.buffer);
  k.setArg(a++, static_cast<cl_uint>(w->scale_dtype));
  k.setArg(a++, static_cast<cl_uint>(w->group_size));
  k.setArg(a++, static_cast<cl_uint>(w->cols));
  if (dp4a) {
    k.setArg(a++, parts_alignment(parts, n_parts));
    k.setArg(a++, *xq);
    k.setArg(a++, *blocks);
  } else {
    k.setArg(a++, single(x));
  }
  k.setArg(a++, static_cast<cl_uint>(n_rows));
  k.setArg(a++, static_cast<cl_uint>(chunks));
  const uint64_t n_blocks = set_batch_parts_args(k, a, parts, n_parts, rows_per_group, bias_dtype);
  launch(be, k, cl::NDRange(size_t(n_blocks * chunks * 128)), cl::NDRange(128));
}

// The batch products' launch for parts of weights of w's shape and form: on tensor cores where the
// device and the tuning allow (q4_batch_mma, the program built), else the dp4a or float batch kernel.
void q4_batch_parts_launch(sl_backend* be, const sl_buffer* x, uint32_t n_rows, const sl_weight* w, uint32_t total_rows,
                           const LaunchPart* parts, uint32_t n_parts, uint32_t bias_dtype, Forms& forms) {
  MatmulShape mshape = shape_of(n_rows, w);
  mshape.out_rows = total_rows;  // the launch's rows decide the tensor-core kernel's m-warps
  if (q4_batch_mma(mshape, be->batch_mma_state != -1, be->tuning)) {
    const Q4BatchMmaShape shape = q4_batch_mma_shape(mshape, be->caps.compute_units, be->tuning);
    if (batch_mma_device(be, shape)) return q4_batch_mma_launch(be, x, n_rows, w, shape, parts, n_parts, bias_dtype, forms);
  }
  q4_batch_launch(be, x, n_rows, w, parts, n_parts, bias_dtype, forms);
}

// A batch of decode rows by one 4-bit weight: a launch a segment, each segment's rows at seg.r0 of
// out's rows.
void q4_batch(sl_backend* be, const sl_buffer* x, uint32_t n_rows, const sl_weight* w, const DevPtr& bias, uint32_t bias_dtype,
              bool has_bias, sl_buffer* out, Forms& forms) {
  for (const auto& seg : segments(be, w)) {
    const LaunchPart part{seg, single(out), w->rows, bias, has_bias};
    q4_batch_parts_launch(be, x, n_rows, w, seg.rows, &part, 1, bias_dtype, forms);
  }
}

// C[m, n] (leading dimension ldc, at c_off floats) = A[m, k] · B[n, k]ᵀ.
void gemm_nt(sl_backend* be, uint32_t m, uint32_t n, uint32_t k, const cl::Buffer& a, uint64_t a_off, const cl::Buffer& b,
             uint64_t b_off, cl::Buffer& c, uint64_t c_off, uint32_t ldc) {
  const bool no_clblast = !be->tuning.clblast;
  if (be->clblast_ok && !no_clblast) {
    cl_command_queue q = be->queue();
    const auto status = clblast::Gemm<float>(clblast::Layout::kRowMajor, clblast::Transpose::kNo, clblast::Transpose::kYes, m, n, k,
                                             1.0f, a(), a_off, k, b(), b_off, k, 0.0f, c(), c_off, ldc, &q, nullptr);
    if (status == clblast::StatusCode::kSuccess) return;
    be->clblast_ok = false;  // e.g. a device CLBlast cannot compile for: our kernel from now on
  }
  auto& kn = kernel(be, "ops", "gemm_nt");
  kn.setArg(0, static_cast<cl_uint>(m));
  kn.setArg(1, static_cast<cl_uint>(n));
  kn.setArg(2, static_cast<cl_uint>(k));
  kn.setArg(3, a);
  kn.setArg(4, static_cast<cl_ulong>(a_off));
  kn.setArg(5, static_cast<cl_uint>(k));
  kn.setArg(6, b);
  kn.setArg(7, static_cast<cl_ulong>(b_off));
  kn.setArg(8, static_cast<cl_uint>(k));
  kn.setArg(9, c);
  kn.setArg(10, static_cast<cl_ulong>(c_off));
  kn.setArg(11, static_cast<cl_uint>(ldc));
  launch(be, kn, cl::NDRange(round_up(n, 16), round_up(m, 16)), cl::NDRange(16, 16));
}

// The tensor-core GEMM's shape for a weight (kernels_cl/gemm_mma.cl): columns a step (MMA_BK: 64
// where K allows, else 32) and activation rows a work-group (MMA_BM: 128, or 64 with 64-column
// steps): tuning mma_bk and mma_bm.
struct MmaShape {
  uint32_t step, rows;
};

MmaShape mma_shape(const sl_backend* be, const sl_weight* w) {
  const uint32_t bk = be->tuning.mma_bk, bm = be->tuning.mma_bm;
  const uint32_t step = bk != 32 && w->cols % 64 == 0 ? 64 : 32;
  const uint32_t rows = step == 64 ? bm : 128;
  return {step, rows};
}

std::string mma_program(MmaShape s) {
  return "gemm_mma_bk" + std::to_string(s.step) + (s.rows == 128 ? "" : "_bm" + std::to_string(s.rows));
}

// Whether the tensor-core GEMM takes this weight: an sm_80+ NVIDIA device with PTX on, 4- or 8-bit
// codes, K in whole 32-column steps, groups a power of two of at least 16 columns (a work-item's
// 16-column share of a step then has one scale, found by a shift). Tuning mma = 0 keeps the CLBlast path. The programs are built on first
// use; if that fails the CLBlast path serves from then on.
bool mma_applies(sl_backend* be, const sl_weight* w) {
  if (be->mma_state == 0) {
    const bool off = !be->tuning.mma;
    if (off || !be->use_ptx || be->caps.sm < 80) {
      be->mma_state = -1;
    } else {
      try {
        for (MmaShape shape : {MmaShape{32, 128}, MmaShape{64, 128}, MmaShape{64, 64}})
          kernel(be, mma_program(shape), "gemm_mma_quant");
        be->mma_state = 1;
      } catch (const std::exception& e) {
        std::fprintf(stderr, "opencl: tensor-core GEMM unavailable, prefill uses CLBlast: %s\n", e.what());
        be->mma_state = -1;
      }
    }
  }
  const uint32_t gs = w->group_size;
  return be->mma_state == 1 && !is_mxfp4(w) && (w->bits == 4 || w->bits == 8) && w->cols % 32 == 0 && gs >= 16 && (gs & (gs - 1)) == 0;
}

// out[:, r0 + n] = x · W[n]ᵀ per segment, MMA_BM × 128 blocks of out per work-group of 256.
void gemm_mma(sl_backend* be, const sl_buffer* x, uint32_t n_rows, const sl_weight* w, sl_buffer* out) {
  const MmaShape shape = mma_shape(be, w);
  // x as f16 pairs in the kernel's chunk order, once for all work-groups.
  cl::Buffer& xh = be->gemm_scratch.at_least(be->context, uint64_t(n_rows) * w->cols * 2);
  auto& pack = kernel(be, mma_program(shape), "gemm_mma_pack_x");
  pack.setArg(0, static_cast<cl_uint>(n_rows));
  pack.setArg(1, static_cast<cl_uint>(w->cols));
  pack.setArg(2, single(x));
  pack.setArg(3, xh);
  launch(be, pack, cl::NDRange(round_up(w->cols / 16, 64), n_rows), cl::NDRange(64, 1));
  uint32_t group_shift = 0;
  while ((1u << group_shift) < w->group_size) ++group_shift;
  auto& k = kernel(be, mma_program(shape), "gemm_mma_quant");
  for (const auto& s : segments(be, w)) {
    k.setArg(0, static_cast<cl_uint>(n_rows));
    k.setArg(1, static_cast<cl_uint>(s.rows));
    k.setArg(2, static_cast<cl_uint>(w->cols));
    k.setArg(3, xh);
    k.setArg(4, s.data.buffer);
    k.setArg(5, static_cast<cl_ulong>(s.data.offset / 4));
    k.setArg(6, static_cast<cl_uint>(w->bits));
    k.setArg(7, s.scales.buffer);
    k.setArg(8, static_cast<cl_ulong>(s.scales.offset));
    k.setArg(9, s.biases.buffer);
    k.setArg(10, static_cast<cl_ulong>(s.biases.offset));
    k.setArg(11, static_cast<cl_uint>(w->scale_dtype));
    k.setArg(12, static_cast<cl_uint>(group_shift));
    k.setArg(13, single(out));
    k.setArg(14, static_cast<cl_uint>(w->rows));
    k.setArg(15, static_cast<cl_uint>(s.r0));
    launch(be, k, cl::NDRange(size_t((n_rows + shape.rows - 1) / shape.rows) * 256, (s.rows + 127) / 128), cl::NDRange(256, 1));
  }
}

void gemm(sl_backend* be, const sl_buffer* x, uint32_t n_rows, const sl_weight* w, sl_buffer* out) {
  if (w->bits && mma_applies(be, w)) return gemm_mma(be, x, n_rows, w, out);
  const uint64_t cols = w->cols;
  const uint32_t block_rows = static_cast<uint32_t>(std::max<uint64_t>(16, kScratchBytes / 4 / cols));
  for (const auto& s : segments(be, w)) {
    if (w->bits == 0 && w->dtype == SL_DTYPE_F32) {
      gemm_nt(be, n_rows, s.rows, w->cols, single(x), 0, s.data.buffer, s.data.offset / 4, single(out), s.r0, w->rows);
      continue;
    }
    cl::Buffer& scratch = be->gemm_scratch.at_least(be->context, std::min<uint64_t>(block_rows, s.rows) * cols * 4);
    for (uint32_t b0 = 0; b0 < s.rows; b0 += block_rows) {
      const uint32_t nb = std::min(block_rows, s.rows - b0);
      const cl::NDRange global(round_up(cols, 64), nb), local(64, 1);
      if (is_mxfp4(w)) {
        auto& k = kernel(be, "ops", "dequant_rows_mxfp4");
        k.setArg(0, s.data.buffer);
        k.setArg(1, static_cast<cl_ulong>(s.data.offset + uint64_t(b0) * row_bytes(w)));
        k.setArg(2, s.scales.buffer);
        k.setArg(3, static_cast<cl_ulong>(s.scales.offset + uint64_t(b0) * (cols / mxfp4::kBlock)));
        k.setArg(4, static_cast<cl_uint>(cols));
        k.setArg(5, scratch);
        launch(be, k, global, local);
      } else if (w->bits == 0) {
        auto& k = kernel(be, "ops", "dequant_rows");
        k.setArg(0, s.data.buffer);
        k.setArg(1, static_cast<cl_ulong>(s.data.offset + uint64_t(b0) * row_bytes(w)));
        k.setArg(2, static_cast<cl_uint>(w->dtype));
        k.setArg(3, static_cast<cl_uint>(cols));
        k.setArg(4, scratch);
        launch(be, k, global, local);
      } else {
        const uint64_t groups = cols / w->group_size, sb = w->scale_dtype == SL_DTYPE_F32 ? 4 : 2;
        auto& k = kernel(be, "ops", "dequant_rows_quant");
        k.setArg(0, s.data.buffer);
        k.setArg(1, static_cast<cl_ulong>(s.data.offset + uint64_t(b0) * row_bytes(w)));
        k.setArg(2, static_cast<cl_ulong>(cols * w->bits / 32));
        k.setArg(3, static_cast<cl_uint>(w->bits));
        k.setArg(4, s.scales.buffer);
        k.setArg(5, static_cast<cl_ulong>(s.scales.offset + uint64_t(b0) * groups * sb));
        k.setArg(6, s.biases.buffer);
        k.setArg(7, static_cast<cl_ulong>(s.biases.offset + uint64_t(b0) * groups * sb));
        k.setArg(8, static_cast<cl_uint>(w->scale_dtype));
        k.setArg(9, static_cast<cl_uint>(w->group_size));
        k.setArg(10, static_cast<cl_uint>(cols));
        k.setArg(11, scratch);
        launch(be, k, global, local);
      }
      gemm_nt(be, n_rows, nb, w->cols, single(x), 0, scratch, 0, single(out), s.r0 + b0, w->rows);
    }
  }
}

// What matmul accepts, or its error.
sl_status check_matmul(const sl_buffer* x, uint32_t n_rows, const sl_weight* w, const sl_weight* bias, const sl_buffer* out,
                       sl_error* err) {
  if (w && is_mxfp4(w)) {
    if (!w->data || !w->scales || w->biases || w->cols == 0 || w->cols % mxfp4::kBlock)
      return set_error(err, SL_ERR_INVALID_ARGUMENT, "matmul: an MXFP4 weight needs codes, scales, no biases and cols in blocks of 32");
    const uint64_t in_range = w->data->bytes >= w->offset ? w->data->bytes - w->offset : 0;
    const uint64_t scales_in_range = w->scales->bytes >= w->scales_offset ? w->scales->bytes - w->scales_offset : 0;
    if (uint64_t(w->rows) * mxfp4::row_bytes(w->cols) > in_range || uint64_t(w->rows) * mxfp4::scales_per_row(w->cols) > scales_in_range)
      return set_error(err, SL_ERR_INVALID_ARGUMENT, "matmul: MXFP4 codes or scales run past their buffers");
  } else if (!w || !w->data || !weight_form_supported(w->dtype, w->bits)) {
    return set_error(err, SL_ERR_UNSUPPORTED, "matmul: unsupported weight form on the OpenCL backend");
  }
  if (w->bits && !is_mxfp4(w) && (!w->scales || !w->biases || w->group_size == 0 || w->cols % w->group_size ||
                  (uint64_t(w->cols) * w->bits) % 32 || !weight_form_supported(w->scale_dtype, 0)))
    return set_error(err, SL_ERR_INVALID_ARGUMENT,
                     "matmul: quantized weight needs scales, biases, and rows of whole groups and 32-bit words");
  if (!x || !out || static_cast<uint64_t>(n_rows) * w->cols * 4 > x->bytes || static_cast<uint64_t>(n_rows) * w->rows * 4 > out->bytes)
    return set_error(err, SL_ERR_INVALID_ARGUMENT, "matmul: activation buffers too small for the shapes");
  if (bias && (!bias->data || bias->bits || !weight_form_supported(bias->dtype, 0) || bias->cols != w->rows))
    return set_error(err, SL_ERR_INVALID_ARGUMENT, "matmul: bias does not match the weight's rows");
  return SL_OK;
}

void matmul_one(sl_backend* be, const sl_buffer* x, uint32_t n_rows, const sl_weight* w, const sl_weight* bias, sl_buffer* out,
                Forms& forms, const NormStep* step) {
  const DevPtr b = bias_range(be, bias, out);
  const MatmulPath path = matmul_path(shape_of(n_rows, w), be->tuning);
  if (path == MatmulPath::kQ4Decode || path == MatmulPath::kMatvec)
    return matvec(be, x, n_rows, w, b, bias ? bias->dtype : 0, bias != nullptr, out, forms, step);
  if (step) norm_step_finish(be, *step, forms);  // (a norm step is decode's: one row)
  if (path == MatmulPath::kQ4Batch) return q4_batch(be, x, n_rows, w, b, bias ? bias->dtype : 0, bias != nullptr, out, forms);
  gemm(be, x, n_rows, w, out);
  if (bias) {
    auto& k = kernel(be, "ops", "add_bias");
    k.setArg(0, single(out));
    k.setArg(1, b.buffer);
    k.setArg(2, static_cast<cl_ulong>(b.offset));
    k.setArg(3, static_cast<cl_uint>(bias->dtype));
    k.setArg(4, static_cast<cl_uint>(w->rows));
    launch(be, k, cl::NDRange(round_up(w->rows, 64), n_rows), cl::NDRange(64, 1));
  }
}

// Decode products of one x in one launch (q/k/v, gate/up) where the weights allow: one row, 4-bit
// weights of one shape and form in one segment each, their words, scales and biases each in one
// device buffer, every part but the last a whole number of teams' rows. Returns false to leave them
// to single products.
bool q4_decode_multi(sl_backend* be, const sl_buffer* x, uint32_t count, const sl_weight* const* ws,
                     const sl_weight* const* biases, sl_buffer* const* outs, Forms& forms, const NormStep* step) {
  if (count < 2 || count > 3) return false;
  const sl_weight* w0 = ws[0];
  uint32_t total_rows = 0;
  uint64_t weights = 0;
  for (uint32_t i = 0; i < count; ++i) {
    total_rows += ws[i]->rows;
    weights += uint64_t(ws[i]->rows) * ws[i]->cols;
  }
  for (uint32_t i = 0; i < count; ++i) {
    const sl_weight* w = ws[i];
    if (!q4_decode_form(1, w) || w->cols != w0->cols || w->group_size != w0->group_size || w->scale_dtype != w0->scale_dtype)
      return false;
    if (i + 1 < count && w->rows % q4_shape(be, total_rows, w0->cols).rows) return false;
  }
  std::vector<LaunchPart> parts;
  uint32_t bias_dtype = 0;
  if (!launch_parts(be, count, ws, biases, outs, parts, bias_dtype)) return false;
  cl::Buffer *xq = nullptr, *blocks = nullptr;
  const bool dp4a = dp4a_input(be, x, w0->cols, weights, forms, step, xq, blocks);
  if (!dp4a && step) norm_step_finish(be, *step, forms);  // the float kernel reads x itself
  q4_decode_launch(be, x, w0, parts.data(), count, dp4a, xq, blocks, bias_dtype, dp4a ? step : nullptr);
  return true;
}

// Batched decode products of one x in one launch (q/k/v; gate/up where the GLU join does not apply):
// 2..3 weights the batch kernels take as parts (q4_batch_parts: one cols, group size and scale form),
// one segment each in one set of buffers, biases (if any) of one form. Two launches fewer a decode
// layer than one a product (perf/NOTES.md). Returns false to leave them to single products.
bool q4_batch_multi(sl_backend* be, const sl_buffer* x, uint32_t n_rows, uint32_t count, const sl_weight* const* ws,
                    const sl_weight* const* biases, sl_buffer* const* outs, Forms& forms) {
  if (count < 2 || count > 3) return false;
  MatmulShape shapes[3];
  uint32_t scale_dtypes_differ = 0, total_rows = 0;
  for (uint32_t i = 0; i < count; ++i) {
    shapes[i] = shape_of(n_rows, ws[i]);
    scale_dtypes_differ |= ws[i]->scale_dtype != ws[0]->scale_dtype;
    total_rows += ws[i]->rows;
  }
  if (!q4_batch_parts(shapes, count, scale_dtypes_differ, be->tuning)) return false;
  std::vector<LaunchPart> parts;
  uint32_t bias_dtype = 0;
  if (!launch_parts(be, count, ws, biases, outs, parts, bias_dtype)) return false;
  q4_batch_parts_launch(be, x, n_rows, ws[0], total_rows, parts.data(), count, bias_dtype, forms);
  return true;
}

// The gate/up pair's device ranges for the joined launch: one segment each, words, scales and
// biases each in one buffer, or false.
bool glu_ranges(sl_backend* be, const sl_weight (&ws)[2], DevPtr (&data)[2], DevPtr (&scales)[2], DevPtr (&biases)[2]) {
  for (uint32_t i = 0; i < 2; ++i) {
    auto segs = segments(be, &ws[i]);
    if (segs.size() != 1) return false;
    data[i] = segs[0].data;
    scales[i] = segs[0].scales;
    biases[i] = segs[0].biases;
  }
  return data[0].buffer() == data[1].buffer() && scales[0].buffer() == scales[1].buffer() && biases[0].buffer() == biases[1].buffer();
}

}  // namespace

// The gate/up products of x and the activation of their outputs in one launch (kGlu): x's form (or
// the norm step's) read from one pair, act's written to the other for down. On NVIDIA with dp4a;
// false, nothing launched, where the weights' device ranges or x's form do not allow it.
bool glu_join(sl_backend* be, const sl_buffer* x, const sl_weight* gate_w, const sl_weight* up_w, sl_buffer* gate, sl_buffer* up,
              sl_buffer* act, uint32_t activation, Forms& forms, const NormStep* step) {
  const sl_weight& w = *gate_w;
  if (!use_dp4a(be) || activation > SL_ACT_GELU) return false;
  const int in_slot = step ? static_cast<int>(step->slot) : forms.find(x, w.cols);
  if (in_slot < 0) return false;
  const sl_weight ws[2] = {*gate_w, *up_w};
  DevPtr data[2], scales[2], biases[2];
  if (!glu_ranges(be, ws, data, scales, biases)) return false;
  const uint32_t rows = w.rows;
  const uint32_t slot = static_cast<uint32_t>(in_slot), out_slot = 1 - slot;
  cl::Buffer& act_q = form_pair(be, out_slot, rows).first;
  cl::Buffer& act_blocks = form_pair(be, out_slot, rows).second;
  const bool in_groups = glu_in_groups(be);
  auto& k = kernel(be, "matvec", in_groups ? "matvec_q4_dp4a_glu_blocks" : "matvec_q4_dp4a_glu");
  cl_uint a = 0;
  k.setArg(a++, data[0].buffer);
  k.setArg(a++, static_cast<cl_ulong>(uint64_t(w.cols) * 4 / 32));
  k.setArg(a++, scales[0].buffer);
  k.setArg(a++, biases[0].buffer);
  k.setArg(a++, static_cast<cl_uint>(w.scale_dtype));
  k.setArg(a++, static_cast<cl_uint>(w.group_size));
  k.setArg(a++, static_cast<cl_uint>(w.cols));
  const uint64_t at = data[0].offset | data[1].offset;
  k.setArg(a++, static_cast<cl_uint>(at % 16 == 0 ? 16 : at % 8 == 0 ? 8 : 4));
  k.setArg(a++, form_pair(be, slot, w.cols).first);
  k.setArg(a++, form_pair(be, slot, w.cols).second);
  for (uint32_t i = 0; i < 2; ++i) {
    k.setArg(a++, static_cast<cl_ulong>(data[i].offset));
    k.setArg(a++, static_cast<cl_ulong>(scales[i].offset));
    k.setArg(a++, static_cast<cl_ulong>(biases[i].offset));
  }
  k.setArg(a++, static_cast<cl_uint>(rows));
  k.setArg(a++, single(gate));
  k.setArg(a++, single(up));
  k.setArg(a++, single(act));
  k.setArg(a++, static_cast<cl_uint>(activation));
  k.setArg(a++, act_q);
  k.setArg(a++, act_blocks);
  set_norm_args(be, k, a, x, step);
  if (in_groups) {
    k.setArg(a++, block_counts(be, rows / 32));
    launch(be, k, cl::NDRange(size_t(rows) * 32), cl::NDRange(128));  // WG in the "matvec" program: a warp a row pair
  } else {
    constexpr size_t kGluWg = 1024;  // GLU_WG in kernels_cl/matvec.cl: 32 rows a work-group
    launch(be, k, cl::NDRange(size_t(rows) / 32 * kGluWg), cl::NDRange(kGluWg));
  }
  forms.made(out_slot, act, rows);
  return true;
}

// ---- The residual join (kResidual, NVIDIA decode): product → add → norm → product in two launches.
//
// Each launch costs ~5–7 µs on the H100 however little it does: skipping add_rms_norm's two launches
// a layer (SLUICE_OPENCL_SKIP) moved decode from 258 to 293 tokens/s (perf/NOTES.md). The norm needs
// the sum of squares of the whole row, so it cannot run inside the product of its output — but the
// product's work-groups can each finish a 32-row block of the residual row (matvec_q4_dp4a_res),
// and the norm is linear after one scalar: the next product scales its sums by 1/rms
// from the blocks' sums of squares (matvec_q4_dp4a, matvec_q4_dp4a_glu: NORM_ARGS; the NormStep the
// next launch takes). The backend option "no-res-join" turns it off (measuring; the tests compare).

namespace {

// The joined product's teams (work-items, rows each; 32 / rows teams a work-group of at most 1024):
// a warp a row by default — on the H100 (perf/results/fused_decode_gpu/run27, run31, run32) 306.6–313.1
// tokens/s in six processes against 303.9–310.7 for teams of 64 × 2 rows, the next best; 32 × 2,
// 128 × 4 and 32 × 4 lost 8–27 %. Tuning res_shape (TEAMxROWS) sets them; cl_tuning.cpp accepts only
// shapes whose work-group of 32 rows has at most 1024 work-items.
Q4Shape res_shape(const sl_backend* be) { return be->tuning.res_shape; }

}  // namespace

void set_norm_step_args(sl_backend* be, cl::Kernel& k, cl_uint a, const sl_weight* weight, float weight_offset,
                        uint32_t slot, uint32_t dim) {
  const DevPtr nw = vector_weight(be, weight, dim);
  auto form = form_pair(be, slot, dim);
  k.setArg(a++, nw.buffer);
  k.setArg(a++, static_cast<cl_ulong>(nw.offset));
  k.setArg(a++, static_cast<cl_uint>(weight->dtype));
  k.setArg(a++, weight_offset);
  k.setArg(a++, form.first);
  k.setArg(a++, form.second);
  k.setArg(a, be->norm_parts.at_least(be->context, uint64_t(dim) / 32 * 4));
}

bool residual_join(sl_backend* be, const sl_buffer* x_in, const sl_weight* w, sl_buffer* p, sl_buffer* resid,
                   const sl_weight* norm_weight, float weight_offset, float eps, sl_buffer* h, Forms& forms, NormStep* left) {
  const uint32_t dim = w->rows;
  if (!use_dp4a(be) || p->chunks.size() != 1 || resid->chunks.size() != 1 || h->chunks.size() != 1) return false;
  const int in_slot = forms.find(x_in, w->cols);
  if (in_slot < 0) return false;
  auto segs = segments(be, w);
  if (segs.size() != 1) return false;
  const Segment& seg = segs[0];
  const uint32_t slot = static_cast<uint32_t>(in_slot), out_slot = 1 - slot;
  auto in_form = form_pair(be, slot, w->cols);
  const Q4Shape shape = res_shape(be);
  auto& k = kernel(be, q4_program(shape), "matvec_q4_dp4a_res");
  cl_uint a = 0;
  k.setArg(a++, seg.data.buffer);
  k.setArg(a++, static_cast<cl_ulong>(uint64_t(w->cols) * 4 / 32));
  k.setArg(a++, seg.scales.buffer);
  k.setArg(a++, seg.biases.buffer);
  k.setArg(a++, static_cast<cl_uint>(w->scale_dtype));
  k.setArg(a++, static_cast<cl_uint>(w->group_size));
  k.setArg(a++, static_cast<cl_uint>(w->cols));
  k.setArg(a++, static_cast<cl_uint>(seg.data.offset % 16 == 0 ? 16 : seg.data.offset % 8 == 0 ? 8 : 4));
  k.setArg(a++, in_form.first);
  k.setArg(a++, in_form.second);
  k.setArg(a++, static_cast<cl_ulong>(seg.data.offset));
  k.setArg(a++, static_cast<cl_ulong>(seg.scales.offset));
  k.setArg(a++, static_cast<cl_ulong>(seg.biases.offset));
  k.setArg(a++, static_cast<cl_uint>(dim));
  k.setArg(a++, single(p));
  k.setArg(a++, single(resid));
  set_norm_step_args(be, k, a, norm_weight, weight_offset, out_slot, dim);
  const size_t res_wg = 32 / shape.rows * shape.team;  // RES_WG in kernels_cl/matvec.cl: 32 rows a work-group
  launch(be, k, cl::NDRange(size_t(dim) / 32 * res_wg), cl::NDRange(res_wg));
  forms.clobbered(out_slot);
  *left = NormStep{resid, norm_weight, weight_offset, eps, h, dim, out_slot};
  return true;
}

void norm_step_finish(sl_backend* be, const NormStep& n, Forms& forms) {
  rms_norm_run(be, n.x, nullptr, n.weight, n.weight_offset, n.out, 1, n.dim, n.eps, forms);  // x holds its input already
}

bool use_dp4a(const sl_backend* be) {
  const bool off = !be->tuning.dp4a;
  return be->use_ptx && be->caps.sm >= 61 && !off;
}

bool int15_scratch(sl_backend* be, uint32_t n_rows, uint64_t cols, cl::Buffer*& xq, cl::Buffer*& blocks) {
  if (n_rows != 1 || cols % 32 || cols > UINT32_MAX || !use_dp4a(be)) return false;
  xq = &be->matvec_x8.at_least(be->context, cols * 2);  // high and low bytes
  blocks = &be->matvec_x8_blocks.at_least(be->context, cols / 32 * 8);
  return true;
}

ProducedForms produced_forms(sl_backend* be, uint64_t n_rows, uint64_t cols) {
  ProducedForms f;
  if (n_rows == 1 && int15_scratch(be, 1, cols, f.xq, f.blocks)) {
    f.rows = 1;
    f.cols = static_cast<uint32_t>(cols);
  } else if (n_rows <= UINT32_MAX &&
             batch_int15_by_producer(static_cast<uint32_t>(n_rows), cols, use_dp4a(be), be->batch_mma_state != -1, be->tuning)) {
    f.xq = &be->batch_x8.at_least(be->context, n_rows * cols * 2);  // as q4_batch_launch reads them
    f.blocks = &be->batch_x8_blocks.at_least(be->context, n_rows * cols / 32 * 8);
    f.rows = static_cast<uint32_t>(n_rows);
    f.cols = static_cast<uint32_t>(cols);
  }
  return f;
}

sl_status matmul(sl_backend* be, const sl_buffer* x, uint32_t n_rows, const sl_weight* w, const sl_weight* bias,
                 sl_buffer* out, Forms& forms, const NormStep* step, sl_error* err) {
  if (auto s = check_matmul(x, n_rows, w, bias, out, err); s != SL_OK) return s;
  if (n_rows == 0) return SL_OK;
  return guarded(err, "matmul", [&] {
    matmul_one(be, x, n_rows, w, bias, out, forms, step);
    return SL_OK;
  });
}

sl_status head_matmul(sl_backend* be, const sl_buffer* x, uint32_t n_tokens, const sl_weight* w, const sl_head_matmul_params& p,
                      sl_buffer* out, sl_error* err) {
  // A weight MATMUL takes but MXFP4 (2.3's form is for products alone); the slice's shape is graph_check's.
  if (w && is_mxfp4(w)) return set_error(err, SL_ERR_UNSUPPORTED, "head_matmul: an MXFP4 weight is not supported");
  const uint64_t in_w = p.transpose ? p.slice_rows : w ? w->cols : 0, out_w = p.transpose ? (w ? w->cols : 0) : p.slice_rows;
  if (auto s = check_matmul(x, 0, w, nullptr, out, err); s != SL_OK) return s;
  if (!fits(x->bytes / 4, 0, uint64_t(n_tokens) * p.n_heads * in_w) || !fits(out->bytes / 4, 0, uint64_t(n_tokens) * p.n_heads * out_w))
    return set_error(err, SL_ERR_INVALID_ARGUMENT, "head_matmul: x or the output is smaller than the heads need");
  if (n_tokens == 0) return SL_OK;
  return guarded(err, "head_matmul", [&] {
    const auto segs = segments(be, w);
    if (segs.size() != 1) throw std::runtime_error("a weight larger than one device allocation");
    const Segment& s = segs[0];
    auto& k = kernel(be, "ops", "head_matmul");
    k.setArg(0, single(x));
    k.setArg(1, single(out));
    k.setArg(2, static_cast<cl_uint>(p.n_heads));
    k.setArg(3, static_cast<cl_uint>(w->cols));
    k.setArg(4, static_cast<cl_uint>(p.head_rows));
    k.setArg(5, static_cast<cl_uint>(p.row_offset));
    k.setArg(6, static_cast<cl_uint>(p.slice_rows));
    k.setArg(7, static_cast<cl_uint>(p.transpose));
    k.setArg(8, s.data.buffer);
    k.setArg(9, static_cast<cl_ulong>(s.data.offset));
    k.setArg(10, static_cast<cl_uint>(w->dtype));
    k.setArg(11, static_cast<cl_uint>(w->bits));
    k.setArg(12, static_cast<cl_ulong>(w->bits ? uint64_t(w->cols) * w->bits / 32 : 0));
    k.setArg(13, w->bits ? s.scales.buffer : s.data.buffer);  // unread without bits
    k.setArg(14, static_cast<cl_ulong>(w->bits ? s.scales.offset : 0));
    k.setArg(15, w->bits ? s.biases.buffer : s.data.buffer);
    k.setArg(16, static_cast<cl_ulong>(w->bits ? s.biases.offset : 0));
    k.setArg(17, static_cast<cl_uint>(w->scale_dtype));
    k.setArg(18, static_cast<cl_uint>(std::max<uint32_t>(1, w->group_size)));
    launch(be, k, cl::NDRange(round_up(out_w, 64), p.n_heads, n_tokens), cl::NDRange(64, 1, 1));
    return SL_OK;
  });
}

sl_status matmul_id(sl_backend* be, const sl_buffer* x, uint32_t x_rows, const sl_weight* w, const sl_buffer* ids, uint32_t n, uint32_t k,
                    uint32_t n_experts, sl_buffer* out, sl_error* err) {
  if (w && is_mxfp4(w)) return set_error(err, SL_ERR_UNSUPPORTED, "matmul_id: an MXFP4 weight is not supported");
  if (!w || n_experts == 0 || w->rows % n_experts) return set_error(err, SL_ERR_INVALID_ARGUMENT, "matmul_id: the weight is not n_experts stacked matrices");
  if (auto s = check_matmul(x, 0, w, nullptr, out, err); s != SL_OK) return s;
  const uint32_t R = w->rows / n_experts;
  const uint64_t slots = uint64_t(n) * k;
  if (!ids || slots * 4 > ids->bytes || uint64_t(x_rows) * w->cols * 4 > x->bytes || slots * R * 4 > out->bytes || (x_rows != n && x_rows != slots))
    return set_error(err, SL_ERR_INVALID_ARGUMENT, "matmul_id: x, ids or the output do not fit");
  if (slots == 0 || R == 0) return SL_OK;
  return guarded(err, "matmul_id", [&] {
    const auto segs = segments(be, w);
    if (segs.size() != 1) throw std::runtime_error("a stacked weight larger than one device allocation");
    const Segment& s = segs[0];
    constexpr uint32_t kWg = 128, kTeam = 32, kRowsPerTeam = 4;  // the "matvec" program's WG and TEAM; ID_R
    const uint64_t words = w->bits ? uint64_t(w->cols) * w->bits / 32 : 0;
    // Both kernels end with the same arguments: the expert's shape, the slots' activations, ids and outputs.
    auto set_slot_args = [&](cl::Kernel& kn, cl_uint first) {
      kn.setArg(first, static_cast<cl_uint>(R));
      kn.setArg(first + 1, static_cast<cl_uint>(n_experts));
      kn.setArg(first + 2, static_cast<cl_uint>(w->cols));
      kn.setArg(first + 3, single(x));
      kn.setArg(first + 4, static_cast<cl_uint>(x_rows == slots ? 1 : 0));
      kn.setArg(first + 5, static_cast<cl_uint>(k));
      kn.setArg(first + 6, single(ids));
      kn.setArg(first + 7, single(out));
    };
    if (matmul_id_takes_q4_rows(w->bits, words, w->group_size)) {
      auto& kn = kernel(be, "matvec", "matvec_id_q4");
      kn.setArg(0, s.data.buffer);
      kn.setArg(1, static_cast<cl_ulong>(s.data.offset));
      kn.setArg(2, static_cast<cl_ulong>(words));
      kn.setArg(3, s.scales.buffer);
      kn.setArg(4, static_cast<cl_ulong>(s.scales.offset));
      kn.setArg(5, s.biases.buffer);
      kn.setArg(6, static_cast<cl_ulong>(s.biases.offset));
      kn.setArg(7, static_cast<cl_uint>(w->scale_dtype));
      kn.setArg(8, static_cast<cl_uint>(w->group_size));
      set_slot_args(kn, 9);
      const uint64_t rows_per_wg = kWg / kTeam * kRowsPerTeam;
      launch(be, kn, cl::NDRange(round_up(R, rows_per_wg) / rows_per_wg * kWg, slots), cl::NDRange(kWg, 1));
      return SL_OK;
    }
    auto& kn = kernel(be, "matvec", "matvec_id");
    kn.setArg(0, s.data.buffer);
    kn.setArg(1, static_cast<cl_ulong>(s.data.offset));
    kn.setArg(2, static_cast<cl_uint>(w->dtype));
    kn.setArg(3, static_cast<cl_uint>(w->bits));
    kn.setArg(4, static_cast<cl_ulong>(words));
    kn.setArg(5, w->bits ? s.scales.buffer : s.data.buffer);  // unread without bits
    kn.setArg(6, static_cast<cl_ulong>(w->bits ? s.scales.offset : 0));
    kn.setArg(7, w->bits ? s.biases.buffer : s.data.buffer);
    kn.setArg(8, static_cast<cl_ulong>(w->bits ? s.biases.offset : 0));
    kn.setArg(9, static_cast<cl_uint>(w->scale_dtype));
    kn.setArg(10, static_cast<cl_uint>(std::max<uint32_t>(1, w->group_size)));
    set_slot_args(kn, 11);
    launch(be, kn, cl::NDRange(round_up(R, kWg / kTeam) / (kWg / kTeam) * kWg, slots), cl::NDRange(kWg, 1));
    return SL_OK;
  });
}

sl_status matmul_multi(sl_backend* be, const sl_buffer* x, uint32_t n_rows, uint32_t count, const sl_weight* const* ws,
                       const sl_weight* const* biases, sl_buffer* const* outs, Forms& forms, const NormStep* step, sl_error* err) {
  if (count == 0 || count > kMatmulMultiMax || !ws || !outs)
    return set_error(err, SL_ERR_INVALID_ARGUMENT, "matmul_multi: count must be 1.." + std::to_string(kMatmulMultiMax));
  for (uint32_t i = 0; i < count; ++i) {
    if (auto s = check_matmul(x, n_rows, ws[i], biases ? biases[i] : nullptr, outs[i], err); s != SL_OK) return s;
    if (ws[i]->cols != ws[0]->cols) return set_error(err, SL_ERR_INVALID_ARGUMENT, "matmul_multi: the weights' cols differ");
    if (outs[i] == x) return set_error(err, SL_ERR_INVALID_ARGUMENT, "matmul_multi: an output aliases x");
    for (uint32_t j = 0; j < i; ++j)
      if (outs[j] == outs[i]) return set_error(err, SL_ERR_INVALID_ARGUMENT, "matmul_multi: two outputs alias");
  }
  if (n_rows == 0) return SL_OK;
  return guarded(err, "matmul_multi", [&] {
    if (n_rows == 1 && q4_decode_multi(be, x, count, ws, biases, outs, forms, step)) return SL_OK;
    if (!step && q4_batch_multi(be, x, n_rows, count, ws, biases, outs, forms)) return SL_OK;
    // One by one, each taking the norm step where all can (they read its form, each writes the same
    // output); else the norm first, as a launch of its own.
    const bool all_dp4a = use_dp4a(be) && std::all_of(ws, ws + count, [&](const sl_weight* w) { return q4_decode_form(n_rows, w); });
    if (step && !all_dp4a) {
      norm_step_finish(be, *step, forms);
      step = nullptr;
    }
    for (uint32_t i = 0; i < count; ++i) matmul_one(be, x, n_rows, ws[i], biases ? biases[i] : nullptr, outs[i], forms, step);
    return SL_OK;
  });
}

}  // namespace sluice::ocl
