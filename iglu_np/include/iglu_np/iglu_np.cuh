// iglu_np C++ prelude: the host/device math shared by every activation's C++ source.
//
// One source, three consumers:
//   * CuPy: preamble = this file + the spec's ``cxx=`` string, compiled by NVRTC as the
//     preamble of one ElementwiseKernel per activation/derivative (iglu_np.backends.cupy_backend);
//   * NVRTC in CI (no GPU): the same preamble and kernel body compiled for sm_80/sm_90;
//   * g++ on the host (no CUDA): IGLU_NP_HOST_DEVICE becomes plain ``inline`` and the tests
//     compare the results with the Numba CPU ufuncs point by point.
//
// Conventions for a spec's ``cxx=`` source (see iglu_np/activations/iglu.py for the example):
//   * everything inside ``namespace iglu_np { ... }``;
//   * one function template per Python kernel, named after the kernel kind:
//       template <class T> IGLU_NP_HOST_DEVICE T <name>_fwd(T x, T p1, ..., T pk);
//       template <class T> IGLU_NP_HOST_DEVICE T <name>_dx(T x, T p1, ..., T pk);
//       template <class T> IGLU_NP_HOST_DEVICE T <name>_d<param>(T x, T p1, ..., T pk);
//     parameters positional, in the spec's declaration order. T is float or double (float16
//     data is converted to float by the kernel before the call);
//   * mirror the Python kernel operation by operation: same branches, same stable forms,
//     same association order (``a * b * c`` is ``(a * b) * c`` in both languages), constants
//     written ``T(c)`` as in Python's ``T(c)``. The host build then matches the Numba CPU
//     ufunc to the last bit wherever libm agrees, which the tests check;
//   * math functions unqualified (``atan(x)``, ``exp(x)``, ``fabs(x)``): inside the namespace
//     they resolve to std:: overloads on the host and to CUDA's float/double overloads on
//     the device; helpers below mirror iglu_np/_math.py (two_prod, mul_dw, exp_dw, sigmoid,
//     log1p_exp, horner, is_f32); ``math.isinf``/``math.isnan`` are ``isinf``/``isnan``;
//   * polynomial coefficients: ``horner(v, c0, c1, ...)`` with the literals generated from
//     the Python tuple (``", ".join(map(repr, COEFFS))``), so both languages use the same
//     doubles and the same evaluation order;
//   * no arrays, no loops with runtime trip counts, no recursion: every kernel must stay in
//     registers (the tests reject PTX with local memory).
//
// Kernel names (CuPy): iglu_np_<name>_<fwd|dx|d<param>|bwd|bwd<param>>, C linkage; the math
// lives in namespace iglu_np, so the names never clash.
#ifndef IGLU_NP_CUH_
#define IGLU_NP_CUH_

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define IGLU_NP_HOST_DEVICE __host__ __device__ __forceinline__
#define IGLU_NP_DEVICE_COMPILE 1
#else
#include <cmath>
#define IGLU_NP_HOST_DEVICE inline
#endif

#define IGLU_NP_PI 3.141592653589793
// Beyond this magnitude double-word corrections are dropped (mirrors _math.BIG).
#define IGLU_NP_BIG 1e30

namespace iglu_np {

#ifndef IGLU_NP_DEVICE_COMPILE
using std::atan;
using std::copysign;
using std::erf;
using std::erfc;
using std::exp;
using std::expm1;
using std::fabs;
using std::fma;
using std::log;
using std::log1p;
using std::sqrt;
using std::tanh;
#endif

// ``a*b = p + e`` exactly; e is 0 where _math.two_prod's Veltkamp split could overflow, so
// host and device agree with the Python helper on the same inputs. FMA gives the exact
// error directly on the device and wherever the host has it (std::fma is always exact).
template <class T> struct dw { T hi, lo; };

template <class T> IGLU_NP_HOST_DEVICE dw<T> two_prod(T a, T b) {
  const T p = a * b;
  T e = fma(a, b, -p);
  if (!(fabs(a) < T(IGLU_NP_BIG) && fabs(b) < T(IGLU_NP_BIG)) || !(fabs(p) < T(IGLU_NP_BIG))) {
    e = T(0);
  }
  dw<T> r = {p, e};
  return r;
}

// ``x * (c_hi + c_lo)`` as a double-word pair, for an exact x and a double-word constant.
template <class T> IGLU_NP_HOST_DEVICE dw<T> mul_dw(T x, T c_hi, T c_lo) {
  dw<T> r = two_prod(x, c_hi);
  r.lo = r.lo + x * c_lo;
  return r;
}

// ``exp(hi + lo)`` for a double-word argument (|lo| tiny, so exp(lo) = 1 + lo).
template <class T> IGLU_NP_HOST_DEVICE T exp_dw(T hi, T lo) {
  const T e = exp(hi);
  return e + e * lo;
}

// Logistic function, accurate in both tails (no 1 - small cancellation).
template <class T> IGLU_NP_HOST_DEVICE T sigmoid(T x) {
  const T e = exp(-fabs(x));
  const T r = T(1) / (T(1) + e);
  if (x < T(0)) return e * r;
  return r;
}

// ``log(1 + exp(x))`` without overflow for large x or loss for x << 0.
template <class T> IGLU_NP_HOST_DEVICE T log1p_exp(T x) {
  return (x > T(0) ? x : T(0)) + log1p(exp(-fabs(x)));
}

// ``c0 + c1 v + c2 v^2 + ...`` by Horner's rule, coefficients ascending, each rounded to T
// first: r = T(c[n-1]); r = r*v + T(c[k]) -- the order of _math.horner.
template <class T> IGLU_NP_HOST_DEVICE T horner(T, double c) { return T(c); }

template <class T, class... R>
IGLU_NP_HOST_DEVICE T horner(T v, double c0, double c1, R... rest) {
  return horner(v, c1, rest...) * v + T(c0);
}


// ---------------------------------------------------------------------------------------
// Twins of further iglu_np/_math.py helpers (and of the ``math`` predicates the kernels use).
// ---------------------------------------------------------------------------------------
#ifndef IGLU_NP_DEVICE_COMPILE
using std::isinf;
using std::isnan;
#endif

// _math.is_f32: whether the kernel computes in float32 (picks float32 coefficient sets and
// hi+lo constants). A compile-time constant, so only the taken branch is code.
template <class T> IGLU_NP_HOST_DEVICE constexpr bool is_f32(T) { return sizeof(T) == 4; }

}  // namespace iglu_np

#endif  // IGLU_NP_CUH_
