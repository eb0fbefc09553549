// The sLSTM block's elementwise work around its loop, forward and backward, as plain loops over contiguous CPU arrays
// (primacy_xlstm.block_compiled, slstm_loop='compiled_block'): the layer's per-head output norm, read from the loop's
// (T, B, H) layout and written in the block's (B, T, H), and the feed-forward layer's GELU gate.
//
// Each call handles the batch elements [first, last); elements are independent, so callers split the batch across
// threads, and each element's arithmetic is the same whatever the split. Nothing is allocated here.
//
// Layout, row-major and contiguous:
//   head norm: y (T, B, NH dh) the loop's outputs; w (NH dh) the norm's weight; out and g (B, T, NH dh); gy (T, B,
//   NH dh); stats (B, T, NH, 2) each row's mean and 1 / sqrt(var + eps); gw (B, NH dh) each batch element's share
//   of the weight's gradient.
//   GELU gate: up (B, T, 2F) the up-projection, gate pre-activations then values; out and g (B, T, F); gup
//   (B, T, 2F).
//
// float64 uses the C library's erf and exp, so it equals PyTorch to rounding; float32 erf is Abramowitz and Stegun's
// 7.1.26 (absolute error <= 1.5e-7, PyTorch's vectorised float erf uses the same formula) on primacy's fast_exp, in
// 16-wide vectors with the same operations in the same order as the scalar form for the remainder, so a lane rounds
// as the scalar code does.

#include <cmath>
#include <cstdint>
#include <cstring>

#include "fast_math.h"

namespace {

using primacy::fast_exp;

using primacy::F16;  // 16 floats; fast_exp has a form for them with the scalar's bits in every lane

// Φ(x) = (1 + erf(x / √2)) / 2 and φ(x) = exp(-x² / 2) / √(2π), GELU's cdf and density: gelu(x) = x Φ(x),
// gelu'(x) = Φ(x) + x φ(x).
template <typename V>
PRIMACY_INLINE void cdf_pdf(V x, V* cdf, V* pdf) {
    const V zero{};
    const V z = x * 0.70710678118654752f;
    const V az = z < zero ? zero - z : z;
    const V e = fast_exp(zero - z * z);  // exp(-x² / 2)
    const V t = 1.0f / (1.0f + 0.3275911f * az);
    V p = zero + 1.061405429f;
    p = p * t - 1.453152027f;
    p = p * t + 1.421413741f;
    p = p * t - 0.284496736f;
    p = p * t + 0.254829592f;
    const V erf_abs = 1.0f - p * t * e;
    const V erf = z < zero ? zero - erf_abs : erf_abs;
    *cdf = 0.5f * (1.0f + erf);
    *pdf = e * 0.39894228040143268f;
}
PRIMACY_INLINE void cdf_pdf(double x, double* cdf, double* pdf) {
    *cdf = 0.5 * (1.0 + std::erf(x * 0.70710678118654752440));
    *pdf = std::exp(-0.5 * x * x) * 0.39894228040143267794;
}

template <typename V, typename R>
PRIMACY_INLINE V load(const R* p) {
    V v;
    std::memcpy(&v, p, sizeof v);
    return v;
}
template <typename V, typename R>
PRIMACY_INLINE void store(R* p, V v) { std::memcpy(p, &v, sizeof v); }

// one position's gate: out = gelu(a) b over F units
template <typename V, typename R>
PRIMACY_INLINE void gelu_gate_one(const R* a, const R* b, R* out, int64_t f) {
    V cdf, pdf;
    const V x = load<V>(a + f);
    cdf_pdf(x, &cdf, &pdf);
    store(out + f, x * cdf * load<V>(b + f));
}
template <typename V, typename R>
PRIMACY_INLINE void gelu_gate_back_one(const R* a, const R* b, const R* g, R* ga, R* gb, int64_t f) {
    V cdf, pdf;
    const V x = load<V>(a + f), gv = load<V>(g + f);
    cdf_pdf(x, &cdf, &pdf);
    store(gb + f, gv * (x * cdf));
    store(ga + f, gv * load<V>(b + f) * (cdf + x * pdf));
}

template <typename R>
PRIMACY_INLINE void gelu_gate_forward(int64_t first, int64_t last, int64_t T, int64_t F, const R* up, R* out) {
    for (int64_t r = first * T; r < last * T; ++r) {
        const R* a = up + r * 2 * F;
        int64_t f = 0;
        if constexpr (sizeof(R) == 4)
            for (; f + 16 <= F; f += 16) gelu_gate_one<F16>(a, a + F, out + r * F, f);
        for (; f < F; ++f) gelu_gate_one<R>(a, a + F, out + r * F, f);
    }
}

template <typename R>
PRIMACY_INLINE void gelu_gate_backward(int64_t first, int64_t last, int64_t T, int64_t F, const R* up, const R* g,
                                       R* gup) {
    for (int64_t r = first * T; r < last * T; ++r) {
        const R* a = up + r * 2 * F;
        R* ga = gup + r * 2 * F;
        int64_t f = 0;
        if constexpr (sizeof(R) == 4)
            for (; f + 16 <= F; f += 16) gelu_gate_back_one<F16>(a, a + F, g + r * F, ga, ga + F, f);
        for (; f < F; ++f) gelu_gate_back_one<R>(a, a + F, g + r * F, ga, ga + F, f);
    }
}

// the per-head layer norm times its weight: each (t, b, head) row of dh units normalised by its mean and biased
// variance (both summed in the order of the units), as PyTorch's layer_norm with no weight, then times w
template <typename R>
PRIMACY_INLINE void head_norm_forward(int64_t first, int64_t last, int64_t T, int64_t B, int64_t NH, int64_t dh,
                                      double eps, const R* y, const R* w, R* out, R* stats) {
    const int64_t H = NH * dh;
    for (int64_t b = first; b < last; ++b) {
        for (int64_t t = 0; t < T; ++t) {
            const R* row = y + (t * B + b) * H;
            R* o = out + (b * T + t) * H;
            R* s = stats + (b * T + t) * NH * 2;
            for (int64_t h = 0; h < NH; ++h) {
                const R* x = row + h * dh;
                R mean = 0, var = 0;
                for (int64_t j = 0; j < dh; ++j) mean += x[j];
                mean /= R(dh);
                for (int64_t j = 0; j < dh; ++j) var += (x[j] - mean) * (x[j] - mean);
                var /= R(dh);
                const R rstd = R(1) / std::sqrt(var + R(eps));
                for (int64_t j = 0; j < dh; ++j) o[h * dh + j] = (x[j] - mean) * rstd * w[h * dh + j];
                s[2 * h] = mean;
                s[2 * h + 1] = rstd;
            }
        }
    }
}

// its gradient: with x̂ = (y - mean) rstd and ĝ = g w, gy = rstd (ĝ - mean(ĝ) - x̂ mean(ĝ x̂)); gw's share Σ_t g x̂
template <typename R>
PRIMACY_INLINE void head_norm_backward(int64_t first, int64_t last, int64_t T, int64_t B, int64_t NH, int64_t dh,
                                       const R* y, const R* w, const R* stats, const R* g, R* gy, R* gw) {
    const int64_t H = NH * dh;
    for (int64_t b = first; b < last; ++b) {
        R* share = gw + b * H;
        for (int64_t u = 0; u < H; ++u) share[u] = R(0);
        for (int64_t t = 0; t < T; ++t) {
            const R* row = y + (t * B + b) * H;
            const R* gr = g + (b * T + t) * H;
            const R* s = stats + (b * T + t) * NH * 2;
            R* out = gy + (t * B + b) * H;
            for (int64_t h = 0; h < NH; ++h) {
                const R mean = s[2 * h], rstd = s[2 * h + 1];
                const int64_t u0 = h * dh;
                R sum_g = 0, sum_gx = 0;
                for (int64_t j = 0; j < dh; ++j) {
                    const R xh = (row[u0 + j] - mean) * rstd;
                    const R gh = gr[u0 + j] * w[u0 + j];
                    sum_g += gh;
                    sum_gx += gh * xh;
                    share[u0 + j] += gr[u0 + j] * xh;
                }
                const R mg = sum_g / R(dh), mgx = sum_gx / R(dh);
                for (int64_t j = 0; j < dh; ++j) {
                    const R xh = (row[u0 + j] - mean) * rstd;
                    out[u0 + j] = rstd * (gr[u0 + j] * w[u0 + j] - mg - xh * mgx);
                }
            }
        }
    }
}

}  // namespace

extern "C" {

int primacy_block_abi() { return 1; }

#define PRIMACY_BLOCK_ENTRIES(R, S)                                                                                  \
    PRIMACY_AVX512 void primacy_gelu_gate_forward_##S(int64_t first, int64_t last, int64_t T, int64_t F,              \
                                                      const R* up, R* out) {                                          \
        gelu_gate_forward(first, last, T, F, up, out);                                                               \
    }                                                                                                                \
    PRIMACY_AVX512 void primacy_gelu_gate_backward_##S(int64_t first, int64_t last, int64_t T, int64_t F,             \
                                                       const R* up, const R* g, R* gup) {                             \
        gelu_gate_backward(first, last, T, F, up, g, gup);                                                           \
    }                                                                                                                \
    PRIMACY_AVX512 void primacy_head_norm_forward_##S(int64_t first, int64_t last, int64_t T, int64_t B, int64_t NH,  \
                                                      int64_t dh, double eps, const R* y, const R* w, R* out,         \
                                                      R* stats) {                                                     \
        head_norm_forward(first, last, T, B, NH, dh, eps, y, w, out, stats);                                         \
    }                                                                                                                \
    PRIMACY_AVX512 void primacy_head_norm_backward_##S(int64_t first, int64_t last, int64_t T, int64_t B, int64_t NH, \
                                                       int64_t dh, const R* y, const R* w, const R* stats,            \
                                                       const R* g, R* gy, R* gw) {                                    \
        head_norm_backward(first, last, T, B, NH, dh, y, w, stats, g, gy, gw);                                       \
    }

PRIMACY_BLOCK_ENTRIES(float, f32)
PRIMACY_BLOCK_ENTRIES(double, f64)

}  // extern "C"
