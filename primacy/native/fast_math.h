// Fast float maths that primacy's compiled kernels share (primacy-mamba's scan, primacy-xlstm's sLSTM loop):
// NativeLibrary (primacy/native/__init__.py) passes this folder to the compiler with -I, and its text is part of every
// library's cache key, so an edit rebuilds them. Every function is inlined into its caller; float64 forms are the C
// library's, for verification against PyTorch; float32 forms are vectorisable, with the same operations in the same
// order in the scalar and 8-wide forms, so that each lane has the bits of the scalar function.

#ifndef PRIMACY_FAST_MATH_H
#define PRIMACY_FAST_MATH_H

#include <cmath>
#include <cstdint>
#include <cstring>

// On x86-64 Linux each entry point is built twice, for AVX2 and for the baseline, and the loader picks the one this
// CPU runs: one library serves every node of a cluster. Neither fuses a multiply and an add (-ffp-contract=off, and
// AVX2 has no FMA), so both round alike.
// PRIMACY_AVX512 adds an AVX-512 build, for kernels whose loops run on 16 floats (the xLSTM plugin's):
// -ffp-contract=off keeps it free of fused multiply-adds too, and where no sum is reordered a vector's width changes no
// bit.
#if defined(__x86_64__) && defined(__linux__) && (defined(__GNUC__) || defined(__clang__))
#define PRIMACY_CLONES __attribute__((target_clones("avx2", "default")))
#define PRIMACY_AVX512 __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define PRIMACY_CLONES
#define PRIMACY_AVX512
#endif
// Everything below an entry point is inlined into it, so that each of its builds compiles all of its loops.
#if defined(__GNUC__) || defined(__clang__)
#define PRIMACY_INLINE inline __attribute__((always_inline))
#else
#define PRIMACY_INLINE inline
#endif

namespace primacy {

// float32 forms are written once for a float and for 8 or 16 floats at once (F8, F16: GCC's and Clang's vector
// extensions): the same operations in the same order, so each lane has the bits of the scalar function. The mixer's
// rows use the 8-wide forms: where GCC vectorises the scalar forms itself, it evaluates the exp's clamped cases as
// branches of their own and selects among the results, which puts two or three divisions where one is written (twice
// the time of the 8-wide form, measured at 2^19 floats).
typedef float F8 __attribute__((vector_size(32)));
typedef int32_t I8 __attribute__((vector_size(32)));
typedef float F16 __attribute__((vector_size(64)));  // one AVX-512 vector, two AVX2 ones
typedef int32_t I16 __attribute__((vector_size(64)));

namespace detail {

PRIMACY_INLINE int32_t to_int(float k) { return static_cast<int32_t>(k); }
PRIMACY_INLINE I8 to_int(F8 k) { return __builtin_convertvector(k, I8); }
PRIMACY_INLINE I16 to_int(F16 k) { return __builtin_convertvector(k, I16); }

// exp(x): 2^k p(r) with k = round(x / ln 2), r = x - k ln 2 (ln 2 in two parts), p the degree-6 Taylor polynomial.
template <typename V>
PRIMACY_INLINE V fast_exp(V x) {
    const V zero{};
    x = x < zero - 87.0f ? zero - 87.0f : (x > zero + 88.0f ? zero + 88.0f : x);
    const V k = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;  // round to nearest
    const V r = x - k * 0.693145751953125f - k * 1.428606765330187045e-06f;
    V p = zero + 1.0f / 720;
    p = p * r + 1.0f / 120;
    p = p * r + 1.0f / 24;
    p = p * r + 1.0f / 6;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    const auto bits = (to_int(k) + 127) << 23;
    V scale;
    std::memcpy(&scale, &bits, sizeof scale);
    return p * scale;
}

// log(1 + w), w ∈ (0, 1]: 2 atanh(s), s = w / (2 + w) ≤ 1/3, by its odd series to s^13.
template <typename V>
PRIMACY_INLINE V log1p_unit(V w) {
    const V zero{};
    const V s = w / (2.0f + w), s2 = s * s;
    V p = zero + 1.0f / 13;
    p = p * s2 + 1.0f / 11;
    p = p * s2 + 1.0f / 9;
    p = p * s2 + 1.0f / 7;
    p = p * s2 + 1.0f / 5;
    p = p * s2 + 1.0f / 3;
    p = p * s2 + 1.0f;
    return 2.0f * s * p;
}

}  // namespace detail

// exp(x) in float, vectorisable. Relative error ≤ 3e-7 (2.5 float ulp) on [-87, 88]; x is clamped there, so
// exp(x < -87) gives e^-87 ≈ 1.6e-38 rather than a subnormal. exp(0) = 1 exactly.
PRIMACY_INLINE float fast_exp(float x) { return detail::fast_exp(x); }
PRIMACY_INLINE F8 fast_exp(F8 x) { return detail::fast_exp(x); }
PRIMACY_INLINE F16 fast_exp(F16 x) { return detail::fast_exp(x); }
// float64 is for verification: the C library's exp, exact to rounding.
PRIMACY_INLINE double fast_exp(double x) { return std::exp(x); }

// log(1 + w) for w ∈ (0, 1] (w = e^-|x| in softplus and log σ); truncation below 3e-8 relative.
PRIMACY_INLINE float log1p_unit(float w) { return detail::log1p_unit(w); }
PRIMACY_INLINE F8 log1p_unit(F8 w) { return detail::log1p_unit(w); }

PRIMACY_INLINE float sigmoid(float x) { return 1.0f / (1.0f + fast_exp(-x)); }
PRIMACY_INLINE F8 sigmoid(F8 x) { return 1.0f / (1.0f + fast_exp(-x)); }
PRIMACY_INLINE double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

}  // namespace primacy

#endif  // PRIMACY_FAST_MATH_H
