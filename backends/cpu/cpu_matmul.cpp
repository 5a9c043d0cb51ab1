// Matrix products with weights stored [out, in] in f32, f16 or bf16, used in place.
// Few rows (decode): each thread takes a range of output features and streams their weight rows once,
// reusing each row for every activation row — decode is bound by reading the weights.
// Many rows (prefill): weights are converted to float32 a block of rows at a time into per-call
// scratch and packed, and our register tiles (float_products.h) multiply the block — prefill is bound
// by arithmetic, and the conversion is paid once per block for all the batch's rows. No float32 copy of the model is ever kept.
// matmul_multi (several products of one input: q/k/v, gate/up) runs the decode products in one
// parallel region, each output as matmul computes it. MXFP4 weights (ABI 2.3) take the float paths,
// their values made in registers (decode, mxfp4_kernels.h) or into the GEMM blocks (prefill).
#include <algorithm>
#include <string>
#include <vector>

#include "cpu_backend.h"
#include "float_products.h"
#include "mxfp4_kernels.h"
#include "quant_kernels.h"
#include "util/mxfp4.h"
#include "util/vec.h"

namespace sluice::cpu {
namespace {

// Up to this many activation rows (a decode step of up to 8 sequences): the streaming path, which reads
// each weight row once; more (prefill): the GEMMs, whose packing pays off over many rows. Measured on
// Qwen2-0.5B 4-bit, 2 threads: at 8 streams the streaming path won (97-143 against 78-106 tokens/s), at 16
// the GEMM (107-150 against 84-118) — perf/NOTES.md, "Batched decode rows on the CPU".
constexpr uint32_t kMatvecMaxRows = 8;
// Weight rows a GEMM block converts and packs at a time: 64 × 4864 floats (1.2 MiB) stay in L2 while
// every tile of activation rows passes over them.
constexpr std::size_t kGemmRows = 64;

// Affine-quantized (MLX): the packed-code kernels of cpu_quant.cpp and quant_gemm.cpp. (MXFP4 has
// bits too, but takes the float paths.)
bool affine(const sl_weight* w) { return w->bits && !mxfp4::is_mxfp4(*w); }

float dot_weight_row(const sl_weight* w, uint32_t r, const float* x) {
  if (mxfp4::is_mxfp4(*w)) return mxfp4_dot(mxfp4_row(w, r), x, w->cols);
  const std::byte* base = weight_data(w);
  const std::size_t cols = w->cols, off = static_cast<std::size_t>(r) * cols;
  switch (w->dtype) {
    case SL_DTYPE_BF16: return dot_bf16(reinterpret_cast<const uint16_t*>(base) + off, x, cols);
    case SL_DTYPE_F16: return dot_f16(reinterpret_cast<const uint16_t*>(base) + off, x, cols);
    default: return dot_f32(reinterpret_cast<const float*>(base) + off, x, cols);
  }
}

#ifdef SLUICE_CPU_AVX512
// Four bf16 or f16 rows against one activation row, 16 columns a step (n a multiple of 16), each
// row's weights requested `prefetch` bytes ahead: the AVX2 loop below reached ~40 % of the read
// bandwidth on a bf16 Qwen2-0.5B, short of what 512-bit loads and the prefetch give.
template <bool Bf16>
void dot4_u16_zmm(const uint16_t* const* w, const float* x, std::size_t n, std::size_t prefetch, float* out) {
  __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
  for (std::size_t i = 0; i < n; i += 16) {
    const __m512 xv = _mm512_loadu_ps(x + i);
    for (int k = 0; k < 4; ++k) {
      if (i % 32 == 0) prefetch_ahead(w[k] + i, prefetch);  // one request a cache line
      const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[k] + i));
      const __m512 v = Bf16 ? _mm512_castsi512_ps(_mm512_maskz_slli_epi32(0xffff, _mm512_maskz_cvtepu16_epi32(0xffff, h), 16))
                            : _mm512_maskz_cvtph_ps(0xffff, h);
      acc[k] = _mm512_fmadd_ps(v, xv, acc[k]);
    }
  }
  for (int k = 0; k < 4; ++k) out[k] = hsum512(acc[k]);
}
#endif

// Output rows [b, e) of the few-rows product (every weight row read once for all activation rows).
// Rows go four at a time from b where the AVX2 path applies, so a result depends on where its range
// starts: callers split the rows as matvec does (ThreadPool::chunk_count).
void matvec_rows(const sl_backend* be, const float* x, uint32_t n_rows, const sl_weight* w, float* out, std::size_t b,
                 std::size_t e) {
  const std::size_t n_out = w->rows, cols = w->cols;
  std::size_t r = b;
  // MXFP4: the same four-row steps as bf16 below (so the same sums), values made from the codes.
  const bool mx = mxfp4::is_mxfp4(*w);
#ifdef SLUICE_CPU_AVX512
  if (be->wide_kernels && mx) {
    for (; r + 4 <= e; r += 4) {
      const Mxfp4Row rows[4] = {mxfp4_row(w, r), mxfp4_row(w, r + 1), mxfp4_row(w, r + 2), mxfp4_row(w, r + 3)};
      for (uint32_t t = 0; t < n_rows; ++t) {
        float s[4];
        mxfp4_dot4_zmm(rows, x + t * cols, cols, be->prefetch_bytes, s);
        for (int k = 0; k < 4; ++k) out[t * n_out + r + k] = s[k];
      }
    }
  }
  if (be->wide_kernels && cols % 16 == 0 && (w->dtype == SL_DTYPE_BF16 || w->dtype == SL_DTYPE_F16)) {
    const auto* base = reinterpret_cast<const uint16_t*>(weight_data(w));
    for (; r + 4 <= e; r += 4) {
      const uint16_t* rows[4] = {base + r * cols, base + (r + 1) * cols, base + (r + 2) * cols, base + (r + 3) * cols};
      for (uint32_t t = 0; t < n_rows; ++t) {
        float s[4];
        if (w->dtype == SL_DTYPE_BF16)
          dot4_u16_zmm<true>(rows, x + t * cols, cols, be->prefetch_bytes, s);
        else
          dot4_u16_zmm<false>(rows, x + t * cols, cols, be->prefetch_bytes, s);
        for (int k = 0; k < 4; ++k) out[t * n_out + r + k] = s[k];
      }
    }
  }
#endif
#ifdef SLUICE_CPU_AVX2
  if (mx) {
    for (; r + 4 <= e; r += 4) {
      const Mxfp4Row rows[4] = {mxfp4_row(w, r), mxfp4_row(w, r + 1), mxfp4_row(w, r + 2), mxfp4_row(w, r + 3)};
      for (uint32_t t = 0; t < n_rows; ++t) {
        float s[4];
        mxfp4_dot4(rows, x + t * cols, cols, s);
        for (int k = 0; k < 4; ++k) out[t * n_out + r + k] = s[k];
      }
    }
  }
  // Four rows at a time where the row length allows whole vectors.
  if (cols % 8 == 0 && (w->dtype == SL_DTYPE_BF16 || w->dtype == SL_DTYPE_F16)) {
    const auto* base = reinterpret_cast<const uint16_t*>(weight_data(w));
    for (; r + 4 <= e; r += 4) {
      const uint16_t* w0 = base + r * cols;
      for (uint32_t t = 0; t < n_rows; ++t) {
        float s[4];
        if (w->dtype == SL_DTYPE_BF16)
          dot4_u16<load_bf16x8>(w0, w0 + cols, w0 + 2 * cols, w0 + 3 * cols, x + t * cols, cols, s);
        else
          dot4_u16<load_f16x8>(w0, w0 + cols, w0 + 2 * cols, w0 + 3 * cols, x + t * cols, cols, s);
        for (int k = 0; k < 4; ++k) out[t * n_out + r + k] = s[k];
      }
    }
  }
#endif
  for (; r < e; ++r)
    for (uint32_t t = 0; t < n_rows; ++t) out[t * n_out + r] = dot_weight_row(w, static_cast<uint32_t>(r), x + t * cols);
}

void matvec(sl_backend* be, const float* x, uint32_t n_rows, const sl_weight* w, float* out) {
  be->pool->parallel_for(w->rows, kMatvecGrain, [&](std::size_t b, std::size_t e, unsigned) { matvec_rows(be, x, n_rows, w, out, b, e); });
}

void gemm(sl_backend* be, const float* x, uint32_t n_rows, const sl_weight* w, float* out) {
  const std::size_t n_out = w->rows, cols = w->cols;
  // Each thread takes ranges of output features, converts kGemmRows weight rows at a time to float32 and
  // packs them for the register tiles (float_products.h), which then run every activation row over them.
  be->pool->parallel_for(n_out, 16, [&](std::size_t b, std::size_t e, unsigned tid) {
    std::vector<float>& block = be->scratch[tid];
    static thread_local PackedRows packed;
    block.resize(std::min(kGemmRows, e - b) * cols);
    for (std::size_t r0 = b; r0 < e; r0 += kGemmRows) {
      const std::size_t rows = std::min(kGemmRows, e - r0);
      for (std::size_t r = 0; r < rows; ++r) weight_row_to_f32(w, static_cast<uint32_t>(r0 + r), block.data() + r * cols);
      pack_rows(block.data(), rows, cols, packed);
      times_packed_rows(x, cols, n_rows, packed, rows, 1.0f, out + r0, n_out);
    }
  });
}

// Whether x · wᵀ (+ bias) into out can run: the weight's form, the buffers' sizes, the bias's length.
sl_status check_product(const char* op, const sl_buffer* x, uint32_t n_rows, const sl_weight* w, const sl_weight* bias,
                        const sl_buffer* out, sl_error* err) {
  if (sl_status s = check_weight_form(op, w, err); s != SL_OK) return s;
  if (!x || !out || static_cast<uint64_t>(n_rows) * w->cols * 4 > x->bytes || static_cast<uint64_t>(n_rows) * w->rows * 4 > out->bytes)
    return set_error(err, SL_ERR_INVALID_ARGUMENT, std::string(op) + ": activation buffers too small for the shapes");
  if (bias && (!weight_dtype_supported(bias) || bias->cols != w->rows))
    return set_error(err, SL_ERR_INVALID_ARGUMENT, std::string(op) + ": bias does not match the weight's rows");
  return SL_OK;
}

// The product on the path its shape takes (may throw std::bad_alloc for scratch).
void product(sl_backend* be, const float* x, uint32_t n_rows, const sl_weight* w, float* out) {
  if (n_rows <= kMatvecMaxRows && affine(w))
    quant_matvec(be, x, n_rows, w, out);
  else if (n_rows <= kMatvecMaxRows)
    matvec(be, x, n_rows, w, out);
  else if (affine(w) && quant_gemm_supported(w))
    quant_gemm(be, x, n_rows, w, out);
  else
    gemm(be, x, n_rows, w, out);
}

void add_bias(const sl_weight* bias, uint32_t n_rows, uint32_t n_out, float* out) {
  std::vector<float> b(bias->cols);
  weight_row_to_f32(bias, 0, b.data());
  for (uint32_t t = 0; t < n_rows; ++t)
    for (uint32_t r = 0; r < n_out; ++r) out[static_cast<std::size_t>(t) * n_out + r] += b[r];
}

// The few-rows products of one input in one parallel region (matvec_products): one fork/join for
// q/k/v instead of three.
void matvec_multi(sl_backend* be, const float* x, uint32_t n_rows, uint32_t count, const sl_weight* const* ws, float* const* outs) {
  FewRowsProduct products[kMatmulMultiMax];
  for (uint32_t i = 0; i < count; ++i) products[i] = {x, n_rows, ws[i], outs[i]};
  matvec_products(be, products, count);
}

}  // namespace

bool few_rows(uint32_t n_rows) { return n_rows <= kMatvecMaxRows; }

sl_status check_weight_form(const char* op, const sl_weight* w, sl_error* err) {
  if (w && mxfp4::is_mxfp4(*w)) {
    if (const char* why = mxfp4_weight_problem(w); *why) return set_error(err, SL_ERR_INVALID_ARGUMENT, std::string(op) + ": " + why);
  } else if (w && w->bits) {
    if (const char* why = quant_weight_problem(w); *why) return set_error(err, SL_ERR_INVALID_ARGUMENT, std::string(op) + ": " + why);
  } else if (!weight_dtype_supported(w)) {
    return set_error(err, SL_ERR_UNSUPPORTED, std::string(op) + ": unknown weight dtype on the CPU backend");
  }
  return SL_OK;
}

void matvec_products(sl_backend* be, const FewRowsProduct* products, std::size_t count) {
  struct Chunk {
    std::size_t product;
    std::size_t begin, end;
  };
  // Reused from call to call; the workers reach them through these references (a thread_local named
  // inside the lambda would be each worker's own).
  thread_local std::vector<Chunk> chunk_list;
  thread_local std::vector<QuantMatvecInput> input_list;
  thread_local std::vector<QuantView> view_list;
  thread_local std::vector<MatvecActivations> prepared_list;
  std::vector<Chunk>& chunks = chunk_list;
  if (input_list.size() < count) input_list.resize(count);
  std::vector<QuantView>& views = view_list;
  std::vector<MatvecActivations>& prepared = prepared_list;
  views.assign(count, QuantView{});
  prepared.assign(count, MatvecActivations{});
  chunks.clear();
  for (std::size_t i = 0; i < count; ++i) {
    const FewRowsProduct& p = products[i];
    if (affine(p.w)) {
      views[i] = quant_view(be, p.w);
      // q/k/v and gate/up usually share an input and a form: prepare the activation once for them.
      std::size_t same = i;
      for (std::size_t j = 0; j < i && same == i; ++j)
        if (affine(products[j].w) && products[j].x == p.x && products[j].n_rows == p.n_rows &&
            QuantMatvecInput::same_preparation(views[j], views[i]))
          same = j;
      prepared[i] = same < i ? prepared[same]
                             : input_list[i].prepare(p.x, p.n_rows, views[i], be->int8_activations ? ActivationForm::kInt8 : ActivationForm::kInt16);
    }
    const std::size_t n = p.w->rows, k = be->pool->chunk_count(n, kMatvecGrain);
    for (std::size_t c = 0; c < k; ++c) chunks.push_back({i, n * c / k, n * (c + 1) / k});
  }
  be->pool->parallel_for(chunks.size(), 1, [&](std::size_t b, std::size_t e, unsigned) {
    for (std::size_t c = b; c < e; ++c) {
      const Chunk& ch = chunks[c];
      const FewRowsProduct& p = products[ch.product];
      if (affine(p.w))
        quant_matvec_rows(views[ch.product], prepared[ch.product], p.n_rows, ch.begin, ch.end, p.out, p.w->rows);
      else
        matvec_rows(be, p.x, p.n_rows, p.w, p.out, ch.begin, ch.end);
    }
  });
}

sl_status matmul(sl_backend* be, const sl_buffer* x, uint32_t n_rows, const sl_weight* w, const sl_weight* bias,
                 sl_buffer* out, sl_error* err) {
  if (sl_status s = check_product("matmul", x, n_rows, w, bias, out, err); s != SL_OK) return s;
  try {
    product(be, f32(x), n_rows, w, f32(out));
  } catch (const std::bad_alloc&) {
    return set_error(err, SL_ERR_OUT_OF_MEMORY, "matmul: out of memory for scratch");
  }
  if (bias) add_bias(bias, n_rows, w->rows, f32(out));
  return SL_OK;
}

sl_status matmul_multi(sl_backend* be, const sl_buffer* x, uint32_t n_rows, uint32_t count, const sl_weight* const* ws,
                       const sl_weight* const* biases, sl_buffer* const* outs, sl_error* err) {
  if (count == 0 || count > kMatmulMultiMax || !ws || !outs)
    return set_error(err, SL_ERR_INVALID_ARGUMENT, "matmul_multi: count must be 1.." + std::to_string(kMatmulMultiMax) +
                                                       " with a weight and an output each");
  for (uint32_t i = 0; i < count; ++i) {
    if (!ws[i]) return set_error(err, SL_ERR_INVALID_ARGUMENT, "matmul_multi: weight " + std::to_string(i) + " is missing");
    if (sl_status s = check_product("matmul_multi", x, n_rows, ws[i], biases ? biases[i] : nullptr, outs[i], err); s != SL_OK) return s;
    if (ws[i]->cols != ws[0]->cols)
      return set_error(err, SL_ERR_INVALID_ARGUMENT, "matmul_multi: the weights differ in columns (one input for all)");
  }
  float* out_f[kMatmulMultiMax];
  for (uint32_t i = 0; i < count; ++i) out_f[i] = f32(outs[i]);
  try {
    if (n_rows <= kMatvecMaxRows) {
      matvec_multi(be, f32(x), n_rows, count, ws, out_f);
    } else {  // prefill: each product is a GEMM bound by arithmetic; one region more is nothing
      for (uint32_t i = 0; i < count; ++i) product(be, f32(x), n_rows, ws[i], out_f[i]);
    }
  } catch (const std::bad_alloc&) {
    return set_error(err, SL_ERR_OUT_OF_MEMORY, "matmul_multi: out of memory for scratch");
  }
  for (uint32_t i = 0; i < count; ++i)
    if (biases && biases[i]) add_bias(biases[i], n_rows, ws[i]->rows, out_f[i]);
  return SL_OK;
}

}  // namespace sluice::cpu
