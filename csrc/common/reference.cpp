#include "common/reference.h"

#include <ATen/Context.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/empty_strided.h>
#include <c10/util/irange.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <limits>
#include <mutex>
#include <numeric>
#include <sstream>

#include "common/proof.h"

namespace fp8_dummy {

bool is_fp8(c10::ScalarType dtype) {
  switch (dtype) {
    case c10::ScalarType::Float8_e4m3fn:
    case c10::ScalarType::Float8_e5m2:
    case c10::ScalarType::Float8_e4m3fnuz:
    case c10::ScalarType::Float8_e5m2fnuz:
    case c10::ScalarType::Float8_e8m0fnu:
      return true;
    default:
      return false;
  }
}

bool is_wide_float(c10::ScalarType dtype) {
  switch (dtype) {
    case c10::ScalarType::Half:
    case c10::ScalarType::BFloat16:
    case c10::ScalarType::Float:
    case c10::ScalarType::Double:
      return true;
    default:
      return false;
  }
}

namespace {

constexpr const char* kSupported =
    "float8_e4m3fn, float8_e5m2, float8_e4m3fnuz, float8_e5m2fnuz, float8_e8m0fnu, "
    "int8, uint8 (through the float16 temp, truncated as copy_ converts), "
    "float16, bfloat16, float32, float64";

// Bounds against the dtype uniform_ runs on (the float16 temp for 1-byte tensors), with
// uniform_impl_'s conditions and wording (ATen/native/DistributionTemplates.h).
template <typename T>
void check_bounds(double low, double high, const char* dtype_name, const OpName& name) {
  const double lowest = static_cast<double>(std::numeric_limits<T>::lowest());
  const double max = static_cast<double>(std::numeric_limits<T>::max());
  // Written so that NaN fails too, as in the reference.
  TORCH_CHECK(low >= lowest && low <= max, name, "from is out of bounds for ", dtype_name,
              " (low=", low, ")");
  TORCH_CHECK(high >= lowest && high <= max, name, "to is out of bounds for ", dtype_name,
              " (high=", high, ")");
  TORCH_CHECK(low <= high, name, "uniform_ expects to return a [from, to) range, ",
              "but found from=", low, " > to=", high);
  TORCH_CHECK(high - low <= max, name, "uniform_ expects to-from <= ", "std::numeric_limits<",
              dtype_name, ">::max(), but found to=", high, " and from=", low,
              " which result in to-from to exceed the limit");
}

}  // namespace

std::ostream& operator<<(std::ostream& out, const OpName& name) {
  out << name.op << ": ";
  if (name.index >= 0) out << "tensors[" << name.index << "]: ";
  return out;
}

void check_init_args(const at::Tensor& self, double low, double high, const OpName& name) {
  TORCH_CHECK(self.defined(), name, "expected a tensor, got an undefined one");
  proof::check_fault_switch();
  const auto dtype = self.scalar_type();
  TORCH_CHECK(uses_half_temp(dtype) || is_wide_float(dtype), name, "unsupported dtype ", dtype,
              "; supported dtypes: ", kSupported);
  switch (uses_half_temp(dtype) ? c10::ScalarType::Half : dtype) {
    case c10::ScalarType::Half:
      check_bounds<c10::Half>(low, high, "c10::Half", name);
      break;
    case c10::ScalarType::BFloat16:
      check_bounds<c10::BFloat16>(low, high, "c10::BFloat16", name);
      break;
    case c10::ScalarType::Float:
      check_bounds<float>(low, high, "float", name);
      break;
    default:
      check_bounds<double>(low, high, "double", name);
      break;
  }
  // The reference fails in copy_ or uniform_ on elements that share memory; we before writing.
  check_distinct(self, name);
}

void check_distinct(const at::Tensor& self, const OpName& name) {
  TORCH_CHECK(self.layout() == c10::kStrided, name, "only strided tensors are supported, got ",
              self.layout());
  const auto overlap = at::has_internal_overlap(self);
  TORCH_CHECK(overlap != at::MemOverlap::Yes, name,
              "unsupported operation: more than one element of the "
              "written-to tensor refers to a single memory location. Please clone() the "
              "tensor before performing the operation.");
  // Symbolic shapes (a fake kernel under dynamic torch.compile): the real kernel checks.
  if (overlap == at::MemOverlap::No || self.unsafeGetTensorImpl()->has_symbolic_sizes_strides()) {
    return;
  }
  const auto [dim, reach] = first_overlap(self.sizes(), self.strides());
  TORCH_CHECK(dim < 0, name, "elements of self (sizes ", self.sizes(), ", strides ", self.strides(),
              ") may share memory: dimension ", dim, "'s stride ", self.stride(dim),
              " does not exceed ", reach,
              ", the furthest offset the dimensions of smaller stride reach (where elements "
              "meet, torch's reference writes bytes that depend on its thread count). Please "
              "clone() the tensor, or fill a view whose elements are distinct");
}

std::pair<int64_t, int64_t> first_overlap(at::IntArrayRef sizes, at::IntArrayRef strides) {
  c10::SmallVector<int64_t, 6> dims;
  for (const auto d : c10::irange(sizes.size())) {
    if (sizes[d] == 0) return {-1, 0};
    if (sizes[d] > 1) dims.push_back(static_cast<int64_t>(d));
  }
  std::stable_sort(dims.begin(), dims.end(),
                   [&](int64_t a, int64_t b) { return strides[a] < strides[b]; });
  int64_t reach = 0;
  for (const int64_t d : dims) {
    if (strides[d] <= reach) return {d, reach};
    reach += strides[d] * (sizes[d] - 1);
  }
  return {-1, 0};
}

MemoryOrder memory_order(const at::Tensor& self, bool contiguous_temp) {
  const int64_t dim = self.dim();
  // The temp's dimensions, outermost first: a contiguous temp's are self's in order; else
  // torch's empty_like(self, float16) is asked on a meta tensor (its rule has changed across
  // versions), except for a dense self, whose strides the temp takes in every version.
  c10::SmallVector<int64_t, 6> perm(dim);
  std::iota(perm.begin(), perm.end(), 0);
  if (!contiguous_temp) {
    at::Tensor temp;
    if (!self.is_non_overlapping_and_dense()) {
      const auto meta_self =
          at::empty_strided(self.sizes(), self.strides(), self.options().device(c10::kMeta));
      temp = at::empty_like(meta_self, meta_self.options().dtype(c10::kHalf));
    }
    const auto tstrides = temp.defined() ? temp.strides() : self.strides();
    // The temp is dense: by decreasing stride is its memory order (size-1 dims dropped below).
    std::stable_sort(perm.begin(), perm.end(),
                     [&](int64_t a, int64_t b) { return tstrides[a] > tstrides[b]; });
  }
  MemoryOrder order;
  for (const int64_t d : perm) {
    const int64_t size = self.size(d);
    const int64_t stride = self.stride(d);
    if (size == 1) continue;
    append_dim(order.sizes, size, order.strides, stride);
  }
  return order;
}

void scatter_bytes(const MemoryOrder& order, uint8_t* base, int64_t first, const uint8_t* src,
                   int64_t len) {
  const auto dims = static_cast<int64_t>(order.sizes.size());
  if (dims == 0) {  // a single element
    if (len > 0) base[0] = src[0];
    return;
  }
  const int64_t inner_size = order.sizes[dims - 1];
  const int64_t inner_stride = order.strides[dims - 1];
  while (len > 0) {
    int64_t rest = first / inner_size;
    const int64_t inner = first - rest * inner_size;
    int64_t offset = inner * inner_stride;
    for (int64_t d = dims - 2; d >= 0; --d) {
      const int64_t q = rest / order.sizes[d];
      offset += (rest - q * order.sizes[d]) * order.strides[d];
      rest = q;
    }
    const int64_t run = std::min(inner_size - inner, len);
    if (inner_stride == 1) {
      std::memcpy(base + offset, src, static_cast<size_t>(run));
    } else {
      for (int64_t i = 0; i < run; ++i) base[offset + i * inner_stride] = src[i];
    }
    first += run;
    src += run;
    len -= run;
  }
}

const uint8_t* cpu_copy_fp8_table(c10::ScalarType dtype) {
  static std::array<std::array<uint8_t, 65536>, cuda::kNumFp8Formats> tables;
  static std::array<std::once_flag, cuda::kNumFp8Formats> once;
  const int slot = static_cast<int>(fp8_format(dtype));
  std::call_once(once[slot], [&] {
    // In pieces below torch's parallel grain: starting its OpenMP pool would hang a child
    // forked later.
    constexpr int64_t kPiece = 16384;
    for (int64_t start = 0; start < 65536; start += kPiece) {
      const auto halves = at::arange(start, start + kPiece, at::TensorOptions().dtype(at::kInt))
                              .to(at::kShort)
                              .view(at::kHalf);
      const auto bytes = halves.to(dtype).view(at::kByte).contiguous();
      std::memcpy(tables[slot].data() + start, bytes.const_data_ptr(), kPiece);
    }
  });
  return tables[slot].data();
}

at::Generator generator_for(const at::Tensor& self, const std::optional<at::Generator>& gen,
                            const char* op) {
  if (!gen.has_value() || !gen->defined())
    return at::globalContext().defaultGenerator(self.device());
  const bool cuda = self.is_cuda();
  TORCH_CHECK(gen->device().type() == self.device().type(), "fp8_dummy.", op,
              ": expected a generator of device type '", cuda ? "cuda" : "cpu", "' for a ",
              cuda ? "CUDA" : "CPU", " tensor, got one of device '", gen->device().str(), "'");
  return *gen;
}

void reference_path(const at::Tensor& self, double low, double high, const at::Generator& gen,
                    bool contiguous_temp) {
  if (contiguous_temp) {
    auto temp = at::empty(self.sizes(), self.options().dtype(at::kHalf));
    temp.uniform_(low, high, gen);
    at::Tensor(self).copy_(temp.to(self.scalar_type()));
    return;
  }
  auto temp = at::empty_like(self, self.options().dtype(at::kHalf));
  temp.uniform_(low, high, gen);
  at::Tensor(self).copy_(temp);
}

}  // namespace fp8_dummy
