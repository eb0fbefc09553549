// The selective scan, forward and backward, as plain loops over contiguous CPU arrays (primacy_mamba.compiled).
//
//     h_t = exp(Δ_t A) ⊙ h_{t-1} + (Δ_t u_t) B_t,    y_t = h_t C_t,    h_{-1} = 0
//
// Each call handles the batch elements [first, last); elements are independent, so callers split the batch across
// threads. Scratch arrays come from the caller (the backward keeps one element's states, (T + 1, E, N), to read
// h_{t-1} while it walks back in time); nothing is allocated here. The D u_t term is added by the caller.
//
// Scratch: h (2 E N + N) in forward (h_{t-1} and h_t, (E, N) each, then one channel's decays); in backward see
// there.
//
// Layout, row-major and contiguous: u, dt, y, gy, gu, gdt (B, T, E); b, c, gb, gc (B, T, N); a (E, N);
// ga_parts (B, E, N), one partial sum of ∂L/∂A per batch element, summed by the caller in a fixed order, so the
// result does not depend on how the batch was split.
//
// The loops over the state index n carry no dependence and contain no branch, so compilers vectorise them
// (with -fno-trapping-math for the clamps); sums over n run in a fixed order in a loop of their own.

#include <cmath>
#include <cstdint>
#include <cstring>

// fast_exp, log1p_unit and sigmoid (scalar and on 8 floats, F8), PRIMACY_CLONES and PRIMACY_INLINE: primacy's
// shared header (primacy/native/fast_math.h, on the include path NativeLibrary gives the compiler).
#include "fast_math.h"

namespace {

using primacy::F8;
using primacy::fast_exp;
using primacy::log1p_unit;
using primacy::sigmoid;

// The mixer's elementwise maps around the scan (mixer_forward, mixer_backward), as torch computes them: softplus(x) =
// log(1 + e^x), x itself above 20 (torch's threshold), its derivative e^x / (e^x + 1) (1 above 20), σ(x) for SiLU.
// float32: from fast_exp and log1p_unit (log(1 + e^-|x|)); float64: the C library's, so that it equals torch to
// rounding. The F8 forms are the same operations in the same order on 8 floats, so each lane has the scalar's bits.
PRIMACY_INLINE float softplus(float x) {
    const float soft = (x > 0.0f ? x : 0.0f) + log1p_unit(fast_exp(x < 0.0f ? x : -x));
    return x > 20.0f ? x : soft;
}
PRIMACY_INLINE double softplus(double x) { return x > 20.0 ? x : std::log1p(std::exp(x)); }
PRIMACY_INLINE float softplus_grad(float x) {
    const float e = fast_exp(x);
    return x > 20.0f ? 1.0f : e / (e + 1.0f);
}
PRIMACY_INLINE double softplus_grad(double x) {
    const double e = std::exp(x);
    return x > 20.0 ? 1.0 : e / (e + 1.0);
}
PRIMACY_INLINE F8 softplus(F8 x) {
    const F8 zero{};
    const F8 soft = (x > zero ? x : zero) + log1p_unit(fast_exp(x < zero ? x : -x));
    return x > zero + 20.0f ? x : soft;
}
PRIMACY_INLINE F8 softplus_grad(F8 x) {
    const F8 e = fast_exp(x);
    return x > 20.0f ? F8{} + 1.0f : e / (e + 1.0f);
}

// Σ_n x_n y_n in a fixed order, in four interleaved partial sums (which compilers keep in one vector register).
template <typename R>
PRIMACY_INLINE R dot(int64_t N, const R* __restrict__ x, const R* __restrict__ y) {
    R lanes[4] = {0, 0, 0, 0};
    int64_t n = 0;
    for (; n + 4 <= N; n += 4)
        for (int j = 0; j < 4; ++j) lanes[j] += x[n + j] * y[n + j];
    R total = (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
    for (; n < N; ++n) total += x[n] * y[n];
    return total;
}

// One channel at one position, over its N states: decay = exp(Δ_t A_e), h_t = decay ⊙ h_{t-1} + (Δ_t u_t) B_t.
template <typename R>
PRIMACY_INLINE void channel_step(int64_t N, R step, R injected, const R* __restrict__ ae, const R* __restrict__ bt,
                         const R* __restrict__ before, R* __restrict__ now, R* __restrict__ decay) {
    for (int64_t n = 0; n < N; ++n) {
        decay[n] = fast_exp(step * ae[n]);
        now[n] = decay[n] * before[n] + injected * bt[n];
    }
}

template <typename R>
PRIMACY_INLINE void forward(int64_t first, int64_t last, int64_t T, int64_t E, int64_t N, const R* u, const R* dt,
                            const R* a, const R* b, const R* c, R* y, R* h) {
    for (int64_t i = first; i < last; ++i) {
        const R* ui = u + i * T * E;
        const R* dti = dt + i * T * E;
        const R* bi = b + i * T * N;
        const R* ci = c + i * T * N;
        R* yi = y + i * T * E;
        std::memset(h, 0, sizeof(R) * E * N);  // h_{-1}
        for (int64_t t = 0; t < T; ++t) {
            const R* before = h + (t % 2) * E * N;  // h_{t-1} and h_t take turns in the first two blocks of h
            R* now = h + (1 - t % 2) * E * N;
            for (int64_t e = 0; e < E; ++e) {
                const R step = dti[t * E + e];
                channel_step(N, step, step * ui[t * E + e], a + e * N, bi + t * N, before + e * N, now + e * N,
                             h + 2 * E * N);
                yi[t * E + e] = dot(N, now + e * N, ci + t * N);
            }
        }
    }
}

// One channel e at one position t, over its N states: G_t = gy_t C_t + carry (into g), ∂L/∂(Δ_t A) =
// G_t ⊙ h_{t-1} ⊙ exp(Δ_t A) (into g_log); adds to ∂L/∂C_t, ∂L/∂B_t and the batch element's ∂L/∂A, and sets carry
// for t - 1.
template <typename R>
PRIMACY_INLINE void channel_backward(int64_t N, R step, R injected, R out, const R* __restrict__ decay,
                                     const R* __restrict__ before, const R* __restrict__ now,
                                     const R* __restrict__ ct, R* __restrict__ carry, R* __restrict__ ga,
                                     R* __restrict__ gb, R* __restrict__ gc, R* __restrict__ g,
                                     R* __restrict__ g_log) {
    for (int64_t n = 0; n < N; ++n) {
        const R grad = out * ct[n] + carry[n];
        const R through_decay = grad * before[n] * decay[n];
        g[n] = grad;
        g_log[n] = through_decay;
        gc[n] += out * now[n];
        gb[n] += grad * injected;
        ga[n] += through_decay * step;
        carry[n] = decay[n] * grad;
    }
}

// Writes gu, gdt (B, T, E), gb, gc (B, T, N) and ga_parts (B, E, N) for [first, last). Scratch: states
// (T + 1, E, N) holds h_{-1} = 0, h_0, ..., h_{T-1}, decays (T, E, N) exp(Δ_t A); carry (E, N) holds
// exp(Δ_{t+1} A) ⊙ G_{t+1}, the part of G_t = ∂L/∂h_t that comes from later positions; g and g_log (N) one
// channel's G_t and ∂L/∂(Δ_t A).
template <typename R>
PRIMACY_INLINE void backward(int64_t first, int64_t last, int64_t T, int64_t E, int64_t N, const R* u, const R* dt,
                             const R* a, const R* b, const R* c, const R* gy, R* gu, R* gdt, R* gb, R* gc,
                             R* ga_parts, R* states, R* carry, R* decays, R* __restrict__ g,
                             R* __restrict__ g_log) {
    for (int64_t i = first; i < last; ++i) {
        const R* ui = u + i * T * E;
        const R* dti = dt + i * T * E;
        const R* bi = b + i * T * N;
        const R* ci = c + i * T * N;
        const R* gyi = gy + i * T * E;
        R *gui = gu + i * T * E, *gdti = gdt + i * T * E, *gbi = gb + i * T * N, *gci = gc + i * T * N;
        R* gai = ga_parts + i * E * N;
        std::memset(states, 0, sizeof(R) * E * N);  // h_{-1}
        for (int64_t t = 0; t < T; ++t) {  // the states h_t of every t, as forward computes them
            const R* before = states + t * E * N;
            R* now = states + (t + 1) * E * N;
            for (int64_t e = 0; e < E; ++e) {
                const R step = dti[t * E + e];
                channel_step(N, step, step * ui[t * E + e], a + e * N, bi + t * N, before + e * N, now + e * N,
                             decays + (t * E + e) * N);
            }
        }
        std::memset(carry, 0, sizeof(R) * E * N);
        std::memset(gai, 0, sizeof(R) * E * N);
        std::memset(gbi, 0, sizeof(R) * T * N);
        std::memset(gci, 0, sizeof(R) * T * N);
        for (int64_t t = T - 1; t >= 0; --t) {
            const R* before = states + t * E * N;  // h_{t-1}, then h_t
            for (int64_t e = 0; e < E; ++e) {
                const int64_t at = t * E + e;
                const R step = dti[at], value = ui[at];
                const R* ae = a + e * N;
                channel_backward(N, step, step * value, gyi[at], decays + at * N, before + e * N, before + (E + e) * N,
                                 ci + t * N, carry + e * N, gai + e * N, gbi + t * N, gci + t * N, g, g_log);
                const R inject = dot(N, g, bi + t * N);  // ∂L/∂(Δ_t u_t)
                gui[at] = inject * step;
                gdti[at] = inject * value + dot(N, g_log, ae);  // ... + Σ_n ∂L/∂(Δ_t A_n) A_n
            }
        }
    }
}

// One position's rows of E channels: Δ = softplus(x + bias) (forward), and the gate silu(z), its derivative and
// softplus's (backward). Each channel's maps are a function of X, R or F8; the rows take float channels 8 at a time
// and the rest one by one (double ones one by one), each with the bits of the scalar maps.
template <typename X, typename R>
PRIMACY_INLINE X load(const R* p) {
    X x;
    std::memcpy(&x, p, sizeof x);
    return x;
}
template <typename X, typename R>
PRIMACY_INLINE void store(R* p, X x) {
    std::memcpy(p, &x, sizeof x);
}
template <typename X, typename R>
PRIMACY_INLINE void step_at(const R* x, const R* bias, R* steps) {
    store(steps, softplus(load<X>(x) + load<X>(bias)));
}
template <typename X, typename R>
PRIMACY_INLINE void gate_at(const R* z, R* gates) {
    const X v = load<X>(z);
    store(gates, v * sigmoid(v));
}
template <typename X, typename R>
PRIMACY_INLINE void gradients_at(const R* x, const R* bias, const R* z, R* gates, R* gate_grads, R* step_grads) {
    const X v = load<X>(z);
    const X sig = sigmoid(v);
    store(gates, v * sig);
    store(gate_grads, sig * (R(1) + v * (R(1) - sig)));  // torch's silu backward
    store(step_grads, softplus_grad(load<X>(x) + load<X>(bias)));
}
// The first channel the rows take one by one: float ones past the last multiple of 8, double ones all.
template <typename R>
PRIMACY_INLINE int64_t one_by_one(int64_t E) {
    return sizeof(R) == sizeof(float) ? E - E % 8 : 0;
}
template <typename R>
PRIMACY_INLINE void step_row(int64_t E, const R* __restrict__ x, const R* __restrict__ bias, R* __restrict__ steps) {
    const int64_t rest = one_by_one<R>(E);
    for (int64_t e = 0; e < rest; e += 8) step_at<F8>(x + e, bias + e, steps + e);
    for (int64_t e = rest; e < E; ++e) step_at<R>(x + e, bias + e, steps + e);
}
template <typename R>
PRIMACY_INLINE void gate_row(int64_t E, const R* __restrict__ z, R* __restrict__ gates) {
    const int64_t rest = one_by_one<R>(E);
    for (int64_t e = 0; e < rest; e += 8) gate_at<F8>(z + e, gates + e);
    for (int64_t e = rest; e < E; ++e) gate_at<R>(z + e, gates + e);
}
template <typename R>
PRIMACY_INLINE void gradient_rows(int64_t E, const R* __restrict__ x, const R* __restrict__ bias,
                                  const R* __restrict__ z, R* __restrict__ gates, R* __restrict__ gate_grads,
                                  R* __restrict__ step_grads) {
    const int64_t rest = one_by_one<R>(E);
    for (int64_t e = 0; e < rest; e += 8)
        gradients_at<F8>(x + e, bias + e, z + e, gates + e, gate_grads + e, step_grads + e);
    for (int64_t e = rest; e < E; ++e)
        gradients_at<R>(x + e, bias + e, z + e, gates + e, gate_grads + e, step_grads + e);
}

template <typename R>
PRIMACY_INLINE void forward_rows(int64_t E, const R* __restrict__ steps, const R* __restrict__ ut,
                                 const R* __restrict__ d, R* __restrict__ sums, R* __restrict__ injected,
                                 R* __restrict__ y) {
    for (int64_t e = 0; e < E; ++e) {
        sums[e] += steps[e];
        injected[e] = steps[e] * ut[e];
        y[e] = d[e] * ut[e];
    }
}

// The scan with the mixer's elementwise work folded in (primacy_mamba.compiled_mixer), as mamba_ssm's CUDA kernel
// does it: from x = dtr + bias (Δ before its bias and softplus), u, z (B, T, E), b, c (B, T, N), A given transposed,
// at (N, E), bias and d (E,),
//
//     Δ_t = softplus(x_t),   h_t = exp(Δ_t A) ⊙ h_{t-1} + (Δ_t u_t) B_t,   out_t = (h_t C_t + D ⊙ u_t) ⊙ silu(z_t)
//
// and dt_sums (B, E), each batch element's Σ_t Δ_t (the mixer reports Δ's mean). Unlike forward above, the state is
// kept (N, E), channels innermost: every loop runs over the E channels of one state index (long, contiguous,
// vectorised), and sums over n are accumulated per channel, in order, with no reduction across vector lanes.
// Scratch: h (N E + 4 E).
template <typename R>
PRIMACY_INLINE void mixer_forward(int64_t first, int64_t last, int64_t T, int64_t E, int64_t N, const R* u,
                                  const R* dtr, const R* bias, const R* at, const R* b, const R* c, const R* d,
                                  const R* z, int64_t zb, int64_t zr, R* out, R* dt_sums, R* scratch) {
    R* __restrict__ h = scratch;
    R* __restrict__ steps = h + N * E;
    R* __restrict__ gates = steps + E;
    R* __restrict__ injected = gates + E;
    R* __restrict__ y = injected + E;
    for (int64_t i = first; i < last; ++i) {
        const R *ui = u + i * T * E, *xi = dtr + i * T * E, *zi = z + i * zb;
        const R *bi = b + i * T * N, *ci = c + i * T * N;
        R* outi = out + i * T * E;
        R* __restrict__ sums = dt_sums + i * E;
        std::memset(h, 0, sizeof(R) * N * E);  // h_{-1}
        std::memset(sums, 0, sizeof(R) * E);
        for (int64_t t = 0; t < T; ++t) {
            const R* __restrict__ ut = ui + t * E;
            step_row(E, xi + t * E, bias, steps);
            gate_row(E, zi + t * zr, gates);
            forward_rows(E, steps, ut, d, sums, injected, y);
            for (int64_t n = 0; n < N; ++n) {
                const R bn = bi[t * N + n], cn = ci[t * N + n];
                const R* __restrict__ an = at + n * E;
                R* __restrict__ hn = h + n * E;
                for (int64_t e = 0; e < E; ++e) {
                    hn[e] = fast_exp(steps[e] * an[e]) * hn[e] + injected[e] * bn;
                    y[e] += hn[e] * cn;
                }
            }
            R* __restrict__ outt = outi + t * E;
            for (int64_t e = 0; e < E; ++e) outt[e] = y[e] * gates[e];
        }
    }
}

// mixer_backward's loops over the E channels of one position, as functions of their own: compilers vectorise them
// once their arrays are known not to overlap (__restrict__ parameters).
template <typename R>
PRIMACY_INLINE void first_rows(int64_t E, const R* __restrict__ st, const R* __restrict__ ut, const R* __restrict__ d,
                               R* __restrict__ injected, R* __restrict__ y) {
    for (int64_t e = 0; e < E; ++e) {
        injected[e] = st[e] * ut[e];
        y[e] = d[e] * ut[e];
    }
}

template <typename R>
PRIMACY_INLINE void start_rows(int64_t E, const R* __restrict__ ut, const R* __restrict__ st,
                               const R* __restrict__ got, const R* __restrict__ yt, const R* __restrict__ gates,
                               const R* __restrict__ gate_grads, R* __restrict__ injected, R* __restrict__ gy,
                               R* __restrict__ gzt) {
    for (int64_t e = 0; e < E; ++e) {
        injected[e] = st[e] * ut[e];
        gy[e] = got[e] * gates[e];
        gzt[e] = got[e] * yt[e] * gate_grads[e];
    }
}

template <typename R>
PRIMACY_INLINE void input_gradients(int64_t E, const R* __restrict__ st, const R* __restrict__ ut,
                                    const R* __restrict__ d, const R* __restrict__ gy, const R* __restrict__ inject,
                                    const R* __restrict__ glog, const R* __restrict__ step_grads, R* __restrict__ gut,
                                    R* __restrict__ gxt, R* __restrict__ gbiasi, R* __restrict__ gdi) {
    for (int64_t e = 0; e < E; ++e) {
        gut[e] = inject[e] * st[e] + gy[e] * d[e];
        const R gx = (inject[e] * ut[e] + glog[e]) * step_grads[e];
        gxt[e] = gx;
        gbiasi[e] += gx;
        gdi[e] += gy[e] * ut[e];
    }
}

// State index n at one position, as mixer_forward computes it, keeping exp(Δ A_n) and h_t: decay = exp(Δ A_n),
// h_t = decay ⊙ h_{t-1} + (Δ u) B_n, y += h_t C_n.
template <typename R>
PRIMACY_INLINE void state_forward(int64_t E, R bn, R cn, const R* __restrict__ an, const R* __restrict__ st,
                                  const R* __restrict__ injected, const R* __restrict__ hb, R* __restrict__ hn,
                                  R* __restrict__ decay, R* __restrict__ y) {
    for (int64_t e = 0; e < E; ++e) {
        decay[e] = fast_exp(st[e] * an[e]);
        hn[e] = decay[e] * hb[e] + injected[e] * bn;
        y[e] += hn[e] * cn;
    }
}

// The backward's blocks of channels: LANES values of R in one vector of GCC's and Clang's vector extensions (compiled
// to as many of the target's vectors as it takes, each lane rounding as scalar code does); the channels past the
// last whole block go through the same code one at a time, as R.
constexpr int64_t LANES = 8;
template <typename R>
struct Lanes {
    typedef R type __attribute__((vector_size(LANES * sizeof(R))));
    typedef R half __attribute__((vector_size(LANES / 2 * sizeof(R))));
};

// ∂L/∂B_t and ∂L/∂C_t are sums over channels, taken as dot() takes them, so that they round as they did when
// dot() computed them: four partial sums, the one of channel e at slot e % 4, in channel order (a block's first
// half, then its second), then the channels past the last multiple of 4, one by one after the partial sums are
// summed (kept at slots 4 to 6 until then). Each state index has 8 slots.
constexpr int64_t SLOTS = 8;
template <typename R>
PRIMACY_INLINE void add_products(R* slots, typename Lanes<R>::type x) {
    typedef typename Lanes<R>::half H;
    H low, high;
    std::memcpy(&low, &x, sizeof low);
    std::memcpy(&high, reinterpret_cast<const char*>(&x) + sizeof low, sizeof high);
    store(slots, (load<H>(slots) + low) + high);
}
template <typename R>
PRIMACY_INLINE void add_products(R* slots, R x) {  // one channel: slots points at its slot
    *slots += x;
}
template <typename R>
PRIMACY_INLINE R slot_sum(const R* slots, int64_t trailing) {
    R total = (slots[0] + slots[1]) + (slots[2] + slots[3]);
    for (int64_t k = 0; k < trailing; ++k) total += slots[4 + k];
    return total;
}

// One block of channels at one position, over every state index n: G = gy C_n + carry, ∂L/∂(Δ A_n) = G h_{t-1}
// exp(Δ A_n) from the kept h_{t-1} and exp(Δ A_n); adds to the element's ∂L/∂A_n, sets carry for t - 1, adds
// gy h_t and G Δ u to the slots of ∂L/∂C_n and ∂L/∂B_n, and writes Σ_n ∂L/∂(Δ A_n) A_n (glog) and ∂L/∂(Δ u)
// (inject). Arrays (N, E) are given at the block's first channel; slots (N, SLOTS) at the block's (or channel's).
template <typename X, typename R>
PRIMACY_INLINE void block_backward(int64_t N, int64_t E, const R* __restrict__ bt, const R* __restrict__ ct,
                                   const R* __restrict__ at, const R* __restrict__ decays,
                                   const R* __restrict__ before, const R* __restrict__ now, const R* __restrict__ st,
                                   const R* __restrict__ gy, const R* __restrict__ injected, R* __restrict__ carry,
                                   R* __restrict__ ga, R* __restrict__ gc_slots, R* __restrict__ gb_slots,
                                   R* __restrict__ inject, R* __restrict__ glog) {
    const X step = load<X>(st), out = load<X>(gy), in = load<X>(injected);
    X log_sum{}, inject_sum{};
    for (int64_t n = 0; n < N; ++n) {
        const int64_t at_n = n * E;
        const X decay = load<X>(decays + at_n);
        const X g = out * ct[n] + load<X>(carry + at_n);
        const X through_decay = g * load<X>(before + at_n) * decay;
        store(ga + at_n, load<X>(ga + at_n) + through_decay * step);
        log_sum += through_decay * load<X>(at + at_n);
        inject_sum += g * bt[n];
        store(carry + at_n, decay * g);
        add_products(gc_slots + n * SLOTS, out * load<X>(now + at_n));
        add_products(gb_slots + n * SLOTS, g * in);
    }
    store(inject, inject_sum);
    store(glog, log_sum);
}

// mixer_forward's gradients for [first, last): gu, gdtr, gz (B, T, E), gb, gc (B, T, N), and per batch element the
// partial sums of ∂L/∂A (transposed, (B, N, E)), ∂L/∂bias and ∂L/∂D ((B, E) each), summed by the caller in batch
// order. A first pass over time computes one element's Δ_t, exp(Δ_t A), h_t and y_t (before the gate) as
// mixer_forward does, and keeps them (reading exp(Δ A) back costs less than computing it again); the second walks
// back in time, over blocks of LANES channels, each block's rows in registers while it runs over the N state
// indices. Every result has the bits it had when this backward computed exp(Δ A) again and took the sums over
// channels with dot() (library ABI 3).
// Scratch ((2 T + 2) N E + 2 T E + 7 E + 2 N SLOTS): every h_t ((T + 1) N E), every exp(Δ_t A) (T N E), the
// carry exp(Δ_{t+1} A) ⊙ G_{t+1} (N E), every Δ_t and y_t (T E each), rows of one position, and the slots of
// ∂L/∂B_t and ∂L/∂C_t.
template <typename R>
PRIMACY_INLINE void mixer_backward(int64_t first, int64_t last, int64_t T, int64_t E, int64_t N, const R* u,
                                   const R* dtr, const R* bias, const R* at, const R* b, const R* c, const R* d,
                                   const R* z, int64_t zb, int64_t zr, const R* gout, R* gu, R* gdtr, R* gb, R* gc,
                                   R* gz, R* ga_parts,
                                   R* gbias_parts, R* gd_parts, R* scratch) {
    typedef typename Lanes<R>::type V;
    R* __restrict__ states = scratch;  // h_{-1} = 0, h_0, ..., h_{T-1}, (N, E) each
    R* __restrict__ decays = states + (T + 1) * N * E;  // exp(Δ_t A), (N, E) each
    R* __restrict__ carry = decays + T * N * E;
    R* __restrict__ steps = carry + N * E;
    R* __restrict__ ys = steps + T * E;  // y_t before the gate
    R* __restrict__ gates = ys + T * E;
    R* __restrict__ gate_grads = gates + E;
    R* __restrict__ step_grads = gate_grads + E;
    R* __restrict__ injected = step_grads + E;
    R* __restrict__ gy = injected + E;  // ∂L/∂y_t before the gate
    R* __restrict__ inject = gy + E;  // ∂L/∂(Δ_t u_t)
    R* __restrict__ glog = inject + E;  // Σ_n ∂L/∂(Δ_t A_n) A_n
    R* __restrict__ gc_slots = glog + E;  // (N, SLOTS) each
    R* __restrict__ gb_slots = gc_slots + N * SLOTS;
    const int64_t whole = E - E % LANES;
    for (int64_t i = first; i < last; ++i) {
        const R *ui = u + i * T * E, *xi = dtr + i * T * E, *zi = z + i * zb, *gi = gout + i * T * E;
        const R *bi = b + i * T * N, *ci = c + i * T * N;
        R *gbi = gb + i * T * N, *gci = gc + i * T * N;
        R* __restrict__ gai = ga_parts + i * N * E;
        R* __restrict__ gbiasi = gbias_parts + i * E;
        R* __restrict__ gdi = gd_parts + i * E;
        std::memset(states, 0, sizeof(R) * N * E);  // h_{-1}
        for (int64_t t = 0; t < T; ++t) {  // Δ_t, exp(Δ_t A), h_t and y_t of every t, as mixer_forward computes them
            const R* __restrict__ ut = ui + t * E;
            R* __restrict__ st = steps + t * E;
            R* __restrict__ yt = ys + t * E;
            step_row(E, xi + t * E, bias, st);
            first_rows(E, st, ut, d, injected, yt);
            for (int64_t n = 0; n < N; ++n) {
                const R bn = bi[t * N + n], cn = ci[t * N + n];
                const R* __restrict__ an = at + n * E;
                const R* __restrict__ hb = states + (t * N + n) * E;
                R* __restrict__ hn = states + ((t + 1) * N + n) * E;
                state_forward(E, bn, cn, an, st, injected, hb, hn, decays + (t * N + n) * E, yt);
            }
        }
        std::memset(carry, 0, sizeof(R) * N * E);
        std::memset(gai, 0, sizeof(R) * N * E);
        std::memset(gbiasi, 0, sizeof(R) * E);
        std::memset(gdi, 0, sizeof(R) * E);
        for (int64_t t = T - 1; t >= 0; --t) {
            const R* __restrict__ ut = ui + t * E;
            const R* __restrict__ st = steps + t * E;
            const R* __restrict__ got = gi + t * E;
            const R* bt = bi + t * N;
            const R* ct = ci + t * N;
            const R* before = states + t * N * E;  // h_{t-1}
            const R* now = before + N * E;  // h_t
            const R* dec = decays + t * N * E;
            gradient_rows(E, xi + t * E, bias, zi + t * zr, gates, gate_grads, step_grads);
            start_rows(E, ut, st, got, ys + t * E, gates, gate_grads, injected, gy, gz + (i * T + t) * E);
            std::memset(gc_slots, 0, sizeof(R) * 2 * N * SLOTS);
            for (int64_t e = 0; e < whole; e += LANES)
                block_backward<V>(N, E, bt, ct, at + e, dec + e, before + e, now + e, st + e, gy + e, injected + e,
                                  carry + e, gai + e, gc_slots, gb_slots, inject + e, glog + e);
            for (int64_t e = whole; e < E; ++e) {
                const int64_t slot = e < E - E % 4 ? e % 4 : 4 + e % 4;  // a partial sum's, or a trailing channel's
                block_backward<R>(N, E, bt, ct, at + e, dec + e, before + e, now + e, st + e, gy + e, injected + e,
                                  carry + e, gai + e, gc_slots + slot, gb_slots + slot, inject + e, glog + e);
            }
            for (int64_t n = 0; n < N; ++n) {
                gci[t * N + n] = slot_sum(gc_slots + n * SLOTS, E % 4);
                gbi[t * N + n] = slot_sum(gb_slots + n * SLOTS, E % 4);
            }
            input_gradients(E, st, ut, d, gy, inject, glog, step_grads, gu + (i * T + t) * E,
                            gdtr + (i * T + t) * E, gbiasi, gdi);
        }
    }
}

// The causal depthwise convolution before the scan and its SiLU (primacy_mamba.compiled_conv): from x (B, T, E) with
// row t of batch element i at x + i xb + t xr (in_proj's output, viewed), taps w (K, E) and bias (E,),
//
//     pre_t = Σ_j w_j ⊙ x_{t-(K-1)+j} + bias  (x_{t<0} = 0: those taps are left out),   out_t = silu(pre_t),
//
// the taps summed in order j = 0, ..., K - 1, then the bias. Each position's row is taken in blocks of channels, 8
// floats at a time (as the mixer's rows) and the rest one by one, every tap of a block in registers.
template <typename X, typename R>
PRIMACY_INLINE X pre_at(int64_t t, int64_t K, const R* x, int64_t xr, const R* w, int64_t E, const R* bias) {
    const int64_t j0 = K - 1 - t > 0 ? K - 1 - t : 0;
    X pre = load<X>(x + (t - (K - 1) + j0) * xr) * load<X>(w + j0 * E);
    for (int64_t j = j0 + 1; j < K; ++j) pre += load<X>(x + (t - (K - 1) + j) * xr) * load<X>(w + j * E);
    return pre + load<X>(bias);
}
template <typename X, typename R>
PRIMACY_INLINE void conv_forward_at(int64_t T, int64_t E, int64_t K, const R* x, int64_t xr, const R* w,
                                    const R* bias, R* out) {
    for (int64_t t = 0; t < T; ++t) {
        const X pre = pre_at<X>(t, K, x, xr, w, E, bias);
        store(out + t * E, pre * sigmoid(pre));
    }
}
template <typename R>
PRIMACY_INLINE void conv_forward(int64_t first, int64_t last, int64_t T, int64_t E, int64_t K, const R* x,
                                 int64_t xb, int64_t xr, const R* w, const R* bias, R* out) {
    const int64_t rest = one_by_one<R>(E);
    for (int64_t i = first; i < last; ++i) {
        for (int64_t e = 0; e < rest; e += 8)
            conv_forward_at<F8>(T, E, K, x + i * xb + e, xr, w + e, bias + e, out + i * T * E + e);
        for (int64_t e = rest; e < E; ++e)
            conv_forward_at<R>(T, E, K, x + i * xb + e, xr, w + e, bias + e, out + i * T * E + e);
    }
}

// One block of channels of conv_forward's gradients: ∂L/∂pre_t = ∂L/∂out_t silu'(pre_t) (torch's silu backward) of
// every t into gpre (T rows of E), added to the element's ∂L/∂bias and, times x, to its ∂L/∂w_j; then gx_t =
// Σ_j w_j ⊙ ∂L/∂pre_{t+(K-1)-j} over the j with t + (K-1) - j < T, in order j = K - 1, ..., 0.
template <typename X, typename R>
PRIMACY_INLINE void conv_backward_at(int64_t T, int64_t E, int64_t K, const R* x, int64_t xr, const R* w,
                                     const R* bias, const R* gout, R* gx, R* gw, R* gbias, R* gpre) {
    X gb = load<X>(gbias);
    for (int64_t t = 0; t < T; ++t) {
        const X pre = pre_at<X>(t, K, x, xr, w, E, bias);
        const X sig = sigmoid(pre);
        const X gp = load<X>(gout + t * E) * (sig * (R(1) + pre * (R(1) - sig)));
        store(gpre + t * E, gp);
        gb += gp;
        for (int64_t j = K - 1 - t > 0 ? K - 1 - t : 0; j < K; ++j)
            store(gw + j * E, load<X>(gw + j * E) + gp * load<X>(x + (t - (K - 1) + j) * xr));
    }
    store(gbias, gb);
    for (int64_t t = 0; t < T; ++t) {
        const int64_t j0 = t + K - 1 - (T - 1) > 0 ? t + K - 1 - (T - 1) : 0;  // the first j with a later pre
        X g = load<X>(gpre + t * E) * load<X>(w + (K - 1) * E);
        for (int64_t j = K - 2; j >= j0; --j) g += load<X>(gpre + (t + K - 1 - j) * E) * load<X>(w + j * E);
        store(gx + t * E, g);
    }
}

// conv_forward's gradients for [first, last): gx (B, T, E), and per batch element the partial sums of ∂L/∂w (B, K, E)
// and ∂L/∂bias (B, E), summed by the caller in batch order. Scratch: ∂L/∂pre_t of every t (T E).
template <typename R>
PRIMACY_INLINE void conv_backward(int64_t first, int64_t last, int64_t T, int64_t E, int64_t K, const R* x,
                                  int64_t xb, int64_t xr, const R* w, const R* bias, const R* gout, R* gx,
                                  R* gw_parts, R* gbias_parts, R* gpre) {
    const int64_t rest = one_by_one<R>(E);
    for (int64_t i = first; i < last; ++i) {
        const R* xi = x + i * xb;
        R* gwi = gw_parts + i * K * E;
        R* gbi = gbias_parts + i * E;
        std::memset(gwi, 0, sizeof(R) * K * E);
        std::memset(gbi, 0, sizeof(R) * E);
        const R* go = gout + i * T * E;
        R* gxi = gx + i * T * E;
        for (int64_t e = 0; e < rest; e += 8)
            conv_backward_at<F8>(T, E, K, xi + e, xr, w + e, bias + e, go + e, gxi + e, gwi + e, gbi + e, gpre + e);
        for (int64_t e = rest; e < E; ++e)
            conv_backward_at<R>(T, E, K, xi + e, xr, w + e, bias + e, go + e, gxi + e, gwi + e, gbi + e, gpre + e);
    }
}

// Σ_i parts_i over count arrays of size values each, in order i = 0, 1, ...: the batch-ordered sums of per-element
// partials (as ``total = parts[0].clone(); total += parts[i]`` in torch, with the same bits), in one call.
template <typename R>
PRIMACY_INLINE void add_into(int64_t size, const R* __restrict__ part, R* __restrict__ total) {
    for (int64_t k = 0; k < size; ++k) total[k] += part[k];
}
template <typename R>
PRIMACY_INLINE void batch_sum(int64_t count, int64_t size, const R* parts, R* total) {
    std::memcpy(total, parts, sizeof(R) * size);
    for (int64_t i = 1; i < count; ++i) add_into(size, parts + i * size, total);
}

}  // namespace

extern "C" {

int primacy_scan_abi() { return 6; }

PRIMACY_CLONES void primacy_scan_forward_f32(int64_t first, int64_t last, int64_t T, int64_t E, int64_t N,
                                             const float* u, const float* dt, const float* a, const float* b,
                                             const float* c, float* y, float* h) {
    forward(first, last, T, E, N, u, dt, a, b, c, y, h);
}

PRIMACY_CLONES void primacy_scan_forward_f64(int64_t first, int64_t last, int64_t T, int64_t E, int64_t N,
                                             const double* u, const double* dt, const double* a, const double* b,
                                             const double* c, double* y, double* h) {
    forward(first, last, T, E, N, u, dt, a, b, c, y, h);
}

PRIMACY_CLONES void primacy_scan_backward_f32(int64_t first, int64_t last, int64_t T, int64_t E, int64_t N,
                                              const float* u, const float* dt, const float* a, const float* b,
                                              const float* c, const float* gy, float* gu, float* gdt, float* gb,
                                              float* gc, float* ga_parts, float* states, float* carry,
                                              float* decays, float* g, float* g_log) {
    backward(first, last, T, E, N, u, dt, a, b, c, gy, gu, gdt, gb, gc, ga_parts, states, carry, decays, g, g_log);
}

PRIMACY_CLONES void primacy_scan_backward_f64(int64_t first, int64_t last, int64_t T, int64_t E, int64_t N,
                                              const double* u, const double* dt, const double* a, const double* b,
                                              const double* c, const double* gy, double* gu, double* gdt,
                                              double* gb, double* gc, double* ga_parts, double* states,
                                              double* carry, double* decays, double* g, double* g_log) {
    backward(first, last, T, E, N, u, dt, a, b, c, gy, gu, gdt, gb, gc, ga_parts, states, carry, decays, g, g_log);
}

#define PRIMACY_MIXER_ENTRIES(R, SUFFIX)                                                                              \
    PRIMACY_CLONES void primacy_mixer_forward_##SUFFIX(int64_t first, int64_t last, int64_t T, int64_t E, int64_t N, \
                                                       const R* u, const R* dtr, const R* bias, const R* at,         \
                                                       const R* b, const R* c, const R* d, const R* z, int64_t zb,   \
                                                       int64_t zr, R* out, R* dt_sums, R* scratch) {                 \
        mixer_forward(first, last, T, E, N, u, dtr, bias, at, b, c, d, z, zb, zr, out, dt_sums, scratch);           \
    }                                                                                                                 \
    PRIMACY_CLONES void primacy_mixer_backward_##SUFFIX(                                                              \
        int64_t first, int64_t last, int64_t T, int64_t E, int64_t N, const R* u, const R* dtr, const R* bias,       \
        const R* at, const R* b, const R* c, const R* d, const R* z, int64_t zb, int64_t zr, const R* gout, R* gu,   \
        R* gdtr, R* gb, R* gc, R* gz, R* ga_parts, R* gbias_parts, R* gd_parts, R* scratch) {                        \
        mixer_backward(first, last, T, E, N, u, dtr, bias, at, b, c, d, z, zb, zr, gout, gu, gdtr, gb, gc, gz,       \
                       ga_parts, gbias_parts, gd_parts, scratch);                                                    \
    }

PRIMACY_MIXER_ENTRIES(float, f32)
PRIMACY_MIXER_ENTRIES(double, f64)

#define PRIMACY_CONV_ENTRIES(R, SUFFIX)                                                                               \
    PRIMACY_CLONES void primacy_conv_forward_##SUFFIX(int64_t first, int64_t last, int64_t T, int64_t E, int64_t K,  \
                                                      const R* x, int64_t xb, int64_t xr, const R* w, const R* bias, \
                                                      R* out) {                                                      \
        conv_forward(first, last, T, E, K, x, xb, xr, w, bias, out);                                                 \
    }                                                                                                                 \
    PRIMACY_CLONES void primacy_conv_backward_##SUFFIX(int64_t first, int64_t last, int64_t T, int64_t E, int64_t K, \
                                                       const R* x, int64_t xb, int64_t xr, const R* w,               \
                                                       const R* bias, const R* gout, R* gx, R* gw_parts,             \
                                                       R* gbias_parts, R* scratch) {                                 \
        conv_backward(first, last, T, E, K, x, xb, xr, w, bias, gout, gx, gw_parts, gbias_parts, scratch);          \
    }

PRIMACY_CONV_ENTRIES(float, f32)
PRIMACY_CONV_ENTRIES(double, f64)

PRIMACY_CLONES void primacy_batch_sum_f32(int64_t count, int64_t size, const float* parts, float* total) {
    batch_sum(count, size, parts, total);
}
PRIMACY_CLONES void primacy_batch_sum_f64(int64_t count, int64_t size, const double* parts, double* total) {
    batch_sum(count, size, parts, total);
}

}  // extern "C"
