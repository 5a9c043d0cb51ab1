// Platforms and devices (enumeration, description, capabilities), errors, and programs: our
// embedded kernels built once per process and cached on disk by source hash, build options, device
// and driver version.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <xxhash.h>

#include "cl_backend.h"
#include "kernels_cl_sources.h"

namespace sluice::ocl {

const char* cl_error_name(cl_int code) {
  switch (code) {
    case CL_DEVICE_NOT_FOUND: return "CL_DEVICE_NOT_FOUND";
    case CL_DEVICE_NOT_AVAILABLE: return "CL_DEVICE_NOT_AVAILABLE";
    case CL_MEM_OBJECT_ALLOCATION_FAILURE: return "CL_MEM_OBJECT_ALLOCATION_FAILURE";
    case CL_OUT_OF_RESOURCES: return "CL_OUT_OF_RESOURCES";
    case CL_OUT_OF_HOST_MEMORY: return "CL_OUT_OF_HOST_MEMORY";
    case CL_BUILD_PROGRAM_FAILURE: return "CL_BUILD_PROGRAM_FAILURE";
    case CL_INVALID_VALUE: return "CL_INVALID_VALUE";
    case CL_INVALID_BUFFER_SIZE: return "CL_INVALID_BUFFER_SIZE";
    case CL_INVALID_KERNEL_ARGS: return "CL_INVALID_KERNEL_ARGS";
    case CL_INVALID_WORK_GROUP_SIZE: return "CL_INVALID_WORK_GROUP_SIZE";
    case CL_INVALID_ARG_SIZE: return "CL_INVALID_ARG_SIZE";
    case CL_INVALID_MEM_OBJECT: return "CL_INVALID_MEM_OBJECT";
    case CL_MEM_COPY_OVERLAP: return "CL_MEM_COPY_OVERLAP";
    case CL_MISALIGNED_SUB_BUFFER_OFFSET: return "CL_MISALIGNED_SUB_BUFFER_OFFSET";
    case CL_INVALID_BINARY: return "CL_INVALID_BINARY";
    case CL_INVALID_PLATFORM: return "CL_INVALID_PLATFORM";
    case -1001: return "CL_PLATFORM_NOT_FOUND_KHR";
    default: return "OpenCL error";
  }
}

sl_status from_cl_error(sl_error* err, const char* what, const cl::Error& e) {
  const cl_int code = e.err();
  const sl_status status = (code == CL_MEM_OBJECT_ALLOCATION_FAILURE || code == CL_OUT_OF_RESOURCES ||
                            code == CL_OUT_OF_HOST_MEMORY || code == CL_INVALID_BUFFER_SIZE)
                               ? SL_ERR_OUT_OF_MEMORY
                               : SL_ERR_DEVICE;
  return set_error(err, status,
                   std::string(what) + ": " + e.what() + " failed with " + cl_error_name(code) + " (" +
                       std::to_string(code) + ")" + (status == SL_ERR_OUT_OF_MEMORY ? ": out of device memory" : ""));
}

std::vector<DeviceRef> all_devices(std::string* why_none) {
  std::vector<DeviceRef> out;
  std::vector<cl::Platform> platforms;
  try {
    cl::Platform::get(&platforms);
  } catch (const cl::Error& e) {
    if (why_none) *why_none = std::string("no OpenCL platform (") + cl_error_name(e.err()) + "; is an ICD installed?)";
    return out;
  }
  if (platforms.empty()) {
    if (why_none) *why_none = "no OpenCL platform";
    return out;
  }
  for (uint32_t p = 0; p < platforms.size(); ++p) {
    std::vector<cl::Device> devices;
    try {
      platforms[p].getDevices(CL_DEVICE_TYPE_ALL, &devices);
    } catch (const cl::Error&) {
      continue;  // a platform without devices
    }
    for (uint32_t d = 0; d < devices.size(); ++d) out.push_back(DeviceRef{platforms[p], devices[d], p, d});
  }
  if (out.empty() && why_none) *why_none = "OpenCL platforms found, but no device on any of them";
  return out;
}

Capabilities device_capabilities(const cl::Device& d) {
  Capabilities c;
  const std::string vendor = d.getInfo<CL_DEVICE_VENDOR>();
  const std::string ext = d.getInfo<CL_DEVICE_EXTENSIONS>();
  c.nvidia = vendor.find("NVIDIA") != std::string::npos && ext.find("cl_nv_device_attribute_query") != std::string::npos;
  if (c.nvidia) {
    cl_uint major = 0, minor = 0;
    // CL_DEVICE_COMPUTE_CAPABILITY_MAJOR_NV / _MINOR_NV
    clGetDeviceInfo(d(), 0x4000, sizeof(major), &major, nullptr);
    clGetDeviceInfo(d(), 0x4001, sizeof(minor), &minor, nullptr);
    c.sm = major * 10 + minor;
  }
  c.unified = d.getInfo<CL_DEVICE_TYPE>() == CL_DEVICE_TYPE_CPU;
  c.base_align = std::max<uint64_t>(16, d.getInfo<CL_DEVICE_MEM_BASE_ADDR_ALIGN>() / 8);
  c.max_alloc = d.getInfo<CL_DEVICE_MAX_MEM_ALLOC_SIZE>();
  c.local_mem = d.getInfo<CL_DEVICE_LOCAL_MEM_SIZE>();
  c.max_wg = d.getInfo<CL_DEVICE_MAX_WORK_GROUP_SIZE>();
  c.compute_units = d.getInfo<CL_DEVICE_MAX_COMPUTE_UNITS>();
  return c;
}

namespace {
void copy_str(char* dst, std::size_t size, const std::string& src) {
  std::strncpy(dst, src.c_str(), size - 1);
  dst[size - 1] = '\0';
}
std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\0' || s.back() == ' ')) s.pop_back();
  return s;
}
}  // namespace

sl_status describe_device(const DeviceRef& ref, sl_device_info* out) {
  sl_device_info info{};
  info.struct_size = sizeof(info);
  info.abi_version = SL_ABI_VERSION;
  const cl::Device& d = ref.device;
  copy_str(info.name, sizeof(info.name), trim(d.getInfo<CL_DEVICE_NAME>()));
  copy_str(info.vendor, sizeof(info.vendor), trim(d.getInfo<CL_DEVICE_VENDOR>()));
  copy_str(info.driver, sizeof(info.driver), trim(d.getInfo<CL_DRIVER_VERSION>()));
  const auto type = d.getInfo<CL_DEVICE_TYPE>();
  copy_str(info.kind, sizeof(info.kind), (type & CL_DEVICE_TYPE_GPU) ? "gpu" : (type & CL_DEVICE_TYPE_CPU) ? "cpu" : "accelerator");
  info.total_memory = d.getInfo<CL_DEVICE_GLOBAL_MEM_SIZE>();
  info.free_memory = 0;
  info.max_alloc = d.getInfo<CL_DEVICE_MAX_MEM_ALLOC_SIZE>();
  info.compute_units = d.getInfo<CL_DEVICE_MAX_COMPUTE_UNITS>();
  const auto caps = device_capabilities(d);
  const std::string ext = d.getInfo<CL_DEVICE_EXTENSIONS>();
  if (ext.find("cl_khr_fp16") != std::string::npos) info.caps |= SL_CAP_F16;
  if (caps.nvidia && caps.sm >= 61) info.caps |= SL_CAP_INT8_DOT;  // dp4a through inline PTX
  if (ext.find("cl_khr_integer_dot_product") != std::string::npos) info.caps |= SL_CAP_INT8_DOT;
  if (caps.nvidia && caps.sm >= 80) info.caps |= SL_CAP_MATRIX;     // mma.sync through inline PTX
  if (caps.unified) info.caps |= SL_CAP_UNIFIED;
  info.caps |= SL_CAP_QUEUED;  // every op is enqueued; download and synchronize wait
  info.caps |= SL_CAP_KV_RECENT_WINDOW;
  // Per-layer layouts: each layer's K/V in its own heads and widths (K and V widths apart), recurrent
  // state kept and copied, and sliding-window layers keeping only their window's pages, read through
  // the batch's window table (cl_kv_geometry.h, cl_kv_cache.cpp).
  info.caps |= SL_CAP_KV_LAYERS | SL_CAP_KV_WINDOW_PAGES;
  const uint32_t size = out->struct_size ? std::min<uint32_t>(out->struct_size, sizeof(info)) : sizeof(info);
  std::memcpy(out, &info, size);
  out->struct_size = size;
  return SL_OK;
}

// ---- programs ----------------------------------------------------------------------------------

std::string kernel_source(const char* name) {
  for (std::size_t i = 0; i < kernels_cl::kSourceCount; ++i)
    if (std::strcmp(kernels_cl::kSources[i].name, name) == 0) return kernels_cl::kSources[i].text;
  throw std::runtime_error(std::string("no embedded kernel source '") + name + "'");
}

std::string program_cache_dir() {
  if (const char* dir = std::getenv("SLUICE_CACHE_DIR"); dir && *dir) return std::string(dir) + "/opencl";
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) return std::string(xdg) + "/sluice/opencl";
  if (const char* home = std::getenv("HOME"); home && *home) return std::string(home) + "/.cache/sluice/opencl";
  return "";
}

namespace {

std::string cache_key(const cl::Device& d, const cl::Platform& p, const std::string& source, const std::string& options) {
  XXH64_state_t* st = XXH64_createState();
  XXH64_reset(st, 0x5c1ce);
  auto feed = [&](const std::string& s) { XXH64_update(st, s.data(), s.size() + 1); };  // with the NUL: fields stay apart
  feed(source);
  feed(options);
  feed(d.getInfo<CL_DEVICE_NAME>());
  feed(d.getInfo<CL_DRIVER_VERSION>());
  feed(p.getInfo<CL_PLATFORM_VERSION>());
  const auto h = XXH64_digest(st);
  XXH64_freeState(st);
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(h));
  return hex;
}

std::string build_log(const cl::Program& program, const cl::Device& d) {
  try {
    return program.getBuildInfo<CL_PROGRAM_BUILD_LOG>(d);
  } catch (const cl::Error&) {
    return "(no build log)";
  }
}

[[noreturn]] void build_failed(const cl::Program& program, const cl::Device& d, const cl::Error& e) {
  std::string log = build_log(program, d);
  if (log.size() > 700) log = log.substr(0, 700) + "...";
  throw std::runtime_error(std::string("kernel build failed (") + cl_error_name(e.err()) + "): " + log);
}

}  // namespace

long env_knob(const char* name, bool (*ok)(long)) {
  const char* e = std::getenv(name);
  const long v = e ? std::strtol(e, nullptr, 10) : 0;
  return ok(v) ? v : 0;
}

Q4Shape q4_shape(const sl_backend* be, uint32_t rows, uint32_t cols) {
  const Tuning& t = be->tuning;
  Q4Shape s = t.q4_base_shape;
  // Two rows a team above 4096 × 4096 on the H100 (the measurements: tuning.txt).
  if (rows >= t.q4_tall_rows) {
    s = t.q4_tall_shape;
  } else if (uint64_t(rows) * cols > t.q4_big_weights) {
    s = t.q4_big_shape;
  } else {
    // Enough warps (32 work-items) to keep q4_warps_per_cu in flight on every compute unit; the
    // larger teams cost a cross-warp sum.
    const uint64_t want_items = uint64_t(t.q4_warps_per_cu) * 32 * std::max<uint32_t>(be->caps.compute_units, 1);
    while (s.team < 128 && uint64_t(rows) / s.rows * s.team < want_items) s.team *= 2;
  }
  if (t.q4_team) s.team = t.q4_team;
  if (t.q4_rows) s.rows = t.q4_rows;
  // q4_shape_of: one matrix shape's team and rows (measuring); the first entry of the shape counts.
  for (const ShapeChoice& c : t.q4_shape_of)
    if (c.rows == rows && c.cols == cols) return c.shape;
  return s;
}

std::string q4_program(Q4Shape s) {
  if (s.team == 32 && s.rows == 4) return "matvec";
  return "matvec_t" + std::to_string(s.team) + "_r" + std::to_string(s.rows);
}

bool program_has_kernel(const cl::Program& program, const char* name) {
  const std::string names = ";" + program.getInfo<CL_PROGRAM_KERNEL_NAMES>() + ";";  // ';'-separated (OpenCL 1.2)
  return names.find(";" + std::string(name) + ";") != std::string::npos;
}

cl::Program build_program(sl_backend* be, const std::string& source, const std::string& options) {
  const cl::Device& d = be->ref.device;
  const std::string dir = program_cache_dir();
  const std::string key = cache_key(d, be->ref.platform, source, options);
  const std::filesystem::path file = dir.empty() ? std::filesystem::path() : std::filesystem::path(dir) / (key + ".bin");
  // SLUICE_OPENCL_BUILD_LOG=1 on NVIDIA: every program built from source with -cl-nv-verbose and its
  // log printed — ptxas's registers, spills and shared memory per kernel (measuring occupancy).
  static const bool build_log = [] {
    const char* e = std::getenv("SLUICE_OPENCL_BUILD_LOG");
    return e && *e == '1';
  }();
  const bool verbose = build_log && be->caps.nvidia;
  const bool use_cache = !dir.empty() && std::getenv("SLUICE_OPENCL_NO_CACHE") == nullptr && !verbose;
  if (use_cache) {
    std::ifstream in(file, std::ios::binary);
    if (in) {
      std::vector<unsigned char> bin((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      try {
        cl::Program::Binaries bins{bin};
        cl::Program program(be->context, {d}, bins);
        program.build({d}, options.c_str());
        return program;
      } catch (const cl::Error&) {
        // A stale or foreign binary: rebuild from source below and overwrite it.
      }
    }
  }
  cl::Program program(be->context, source);
  try {
    program.build({d}, (verbose ? options + " -cl-nv-verbose" : options).c_str());
  } catch (const cl::Error& e) {
    build_failed(program, d, e);
  }
  if (verbose)
    std::fprintf(stderr, "opencl build log (%s):\n%s\n", options.c_str(), program.getBuildInfo<CL_PROGRAM_BUILD_LOG>(d).c_str());
  if (use_cache) {
    try {
      auto bins = program.getInfo<CL_PROGRAM_BINARIES>();
      if (!bins.empty() && !bins[0].empty()) {
        std::error_code ec;
        std::filesystem::create_directories(dir, ec);
        const auto tmp = file.string() + ".tmp" + std::to_string(::getpid());
        {
          std::ofstream out(tmp, std::ios::binary);
          out.write(reinterpret_cast<const char*>(bins[0].data()), static_cast<std::streamsize>(bins[0].size()));
        }
        std::filesystem::rename(tmp, file, ec);  // atomic: concurrent processes never read half a file
        if (ec) std::filesystem::remove(tmp, ec);
      }
    } catch (const std::exception&) {
      // The cache is an optimisation: a read-only home directory costs only build time.
    }
  }
  return program;
}

std::string nv_register_cap(const sl_backend* be, uint32_t cap) {
  if (!be->caps.nvidia) return "";
  return cap >= 16 && cap <= 255 ? " -cl-nv-maxrregcount=" + std::to_string(cap) : "";
}

cl::Kernel& kernel(sl_backend* be, const std::string& program, const char* name) {
  const std::string key = program + "/" + name;
  auto it = be->kernels.find(key);
  if (it != be->kernels.end()) return it->second;
  auto pit = be->programs.find(program);
  if (pit == be->programs.end()) {
    std::string source = kernel_source("common"), options = "-cl-std=CL1.2";
    if (program == "ops") {
      source += kernel_source("warp") + kernel_source("elementwise") + kernel_source("norms") + kernel_source("rope") +
                kernel_source("gemm") + kernel_source("recurrent");
      options += " -DWG=64";
      if (be->use_ptx) options += " -DSLUICE_PTX_SHFL";  // the producers of the dp4a matvec's input
      if (be->use_ptx && be->caps.sm >= 70) options += " -DSLUICE_PTX_FENCE";  // argmax in one launch
    } else if (program.rfind("matvec_batch_t", 0) == 0) {  // "matvec_batch_t8_r2": BATCH_T, BATCH_R
      source += kernel_source("warp") + kernel_source("matvec") + kernel_source("matvec_batch");
      const auto r = program.find("_r");
      options += " -DWG=128 -DTEAM=32 -DMAX_T=8 -DBATCH_T=" + program.substr(std::strlen("matvec_batch_t"), r - std::strlen("matvec_batch_t")) +
                 " -DBATCH_R=" + program.substr(r + 2);
      if (be->use_ptx) options += " -DSLUICE_PTX_SHFL";
      options += nv_register_cap(be, be->tuning.maxrreg);
    } else if (program.rfind("matvec_batch_mma_", 0) == 0) {  // inline PTX: built only where be->use_ptx (cl_matmul.cpp)
      // "matvec_batch_mma_n4_m1_s4_w8_g64_u2_i0": BM_NT, BM_MT, BM_MW, BM_WARPS, BM_GSTEP, BM_UNROLL, BM_ILV
      // (q4_batch_mma_program).
      source += kernel_source("gemm_mma") + kernel_source("matvec_batch_mma");
      static constexpr std::pair<char, const char*> kFields[] = {{'n', "BM_NT"},    {'m', "BM_MT"},    {'s', "BM_MW"},
                                                                 {'w', "BM_WARPS"}, {'g', "BM_GSTEP"}, {'u', "BM_UNROLL"},
                                                                 {'i', "BM_ILV"}};
      std::size_t at = std::strlen("matvec_batch_mma_");
      for (const auto& [letter, macro] : kFields) {
        const std::size_t end = std::min(program.find('_', at), program.size());
        if (at >= program.size() || program[at] != letter) throw std::runtime_error("malformed program name " + program);
        options += std::string(" -D") + macro + "=" + program.substr(at + 1, end - at - 1);
        at = end + 1;
      }
    } else if (program.rfind("matvec", 0) == 0) {  // "matvec", or "matvec_t64_r2" and the like: Q4_TEAM, R4
      source += kernel_source("warp") + kernel_source("matvec");
      if (program == "matvec") source += kernel_source("moe");  // its kernels use the team sums and row loops
      options += " -DWG=128 -DTEAM=32 -DMAX_T=8";
      const auto r = program.find("_r");
      if (program != "matvec")
        options += " -DQ4_TEAM=" + program.substr(std::strlen("matvec_t"), r - std::strlen("matvec_t")) + " -DR4=" + program.substr(r + 2);
      if (be->use_ptx) options += " -DSLUICE_PTX_SHFL";
      options += nv_register_cap(be, be->tuning.maxrreg);
    } else if (program.rfind("gemm_mma_bk", 0) == 0) {  // inline PTX: built only where be->use_ptx (cl_matmul.cpp)
      source += kernel_source("gemm_mma");
      // "gemm_mma_bk64" or "gemm_mma_bk64_bm64": MMA_BK and MMA_BM (128 unless named).
      const std::string shape = program.substr(std::strlen("gemm_mma_bk"));
      const auto bm = shape.find("_bm");
      options += " -DMMA_BK=" + shape.substr(0, bm);
      if (bm != std::string::npos) options += " -DMMA_BM=" + shape.substr(bm + 3);
    } else if (program.rfind("attention_mma_d", 0) == 0) {  // inline PTX: built only where be->use_ptx (cl_attention.cpp)
      source += kernel_source("attention_mma");
      // "attention_mma_d128" or "attention_mma_d128_q128": HEAD_DIM and AM_BQ (64 unless named).
      const std::string shape = program.substr(std::strlen("attention_mma_d"));
      const auto bq = shape.find("_q");
      options += " -DHEAD_DIM=" + shape.substr(0, bq);
      if (bq != std::string::npos) options += " -DAM_BQ=" + shape.substr(bq + 2);
    } else {
      throw std::runtime_error("unknown program " + program);
    }
    pit = be->programs.emplace(program, build_program(be, source, options)).first;
  }
  return be->kernels.emplace(key, cl::Kernel(pit->second, name)).first->second;
}

}  // namespace sluice::ocl
