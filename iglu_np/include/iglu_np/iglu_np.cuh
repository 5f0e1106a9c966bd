// iglu_np C++ prelude: the few primitives that the generated C++ needs.
//
// The C++ of every activation is generated from its Python kernels (and the helpers they
// call, down to the CPU's elementary functions in iglu_np/_vmath.py) by
// iglu_np/backends/codegen/cxx_translate.py; nothing activation-specific is written here by hand.
// One source, three consumers:
//   * CuPy: preamble = this file + the generated C++, compiled by NVRTC as the preamble of
//     one ElementwiseKernel per activation/derivative (iglu_np.backends.cupy_backend);
//   * NVRTC in CI (no GPU): the same preamble and kernel body compiled for sm_80/sm_90;
//   * g++ on the host (no CUDA): IGLU_NP_HOST_DEVICE becomes plain ``inline`` and the tests
//     compare the results with the Numba CPU ufuncs bit for bit.
//
// Generated functions are templates ``k_<module>__<function>`` with deduced types, as
// Numba types the Python at each call; the public entry points are
//   template <class T> IGLU_NP_HOST_DEVICE T <name>_fwd(T x, T p1, ..., T pk);
//   template <class T> IGLU_NP_HOST_DEVICE T <name>_dx(T x, T p1, ..., T pk);
//   template <class T> IGLU_NP_HOST_DEVICE T <name>_d<param>(T x, T p1, ..., T pk);
// T is float or double (float16 data is converted to float by the kernel before the call).
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
#include <cstring>
#define IGLU_NP_HOST_DEVICE inline
#endif

namespace iglu_np {

#ifndef IGLU_NP_DEVICE_COMPILE
using std::copysign;
using std::fabs;
using std::floor;
using std::fma;
using std::ceil;
using std::isfinite;
using std::isinf;
using std::isnan;
using std::sqrt;
#endif

// The value type of an expression (decltype of a select of lvalues is a reference): the
// type of a local that the generated code declares before the branch that assigns it.
template <class A> struct plain { typedef A type; };
template <class A> struct plain<A&> { typedef A type; };
#define IGLU_NP_TYPE(e) typename iglu_np::plain<decltype(e)>::type

// Python's abs: fabs for floats (clears the sign of -0.0), plain for integers.
IGLU_NP_HOST_DEVICE float py_abs(float a) { return fabsf(a); }
IGLU_NP_HOST_DEVICE double py_abs(double a) { return fabs(a); }
IGLU_NP_HOST_DEVICE int py_abs(int a) { return a < 0 ? -a : a; }
IGLU_NP_HOST_DEVICE long long py_abs(long long a) { return a < 0 ? -a : a; }

// Numba's max/min of two values: both cast to the common type, then
// select(b > a, b, a) / select(b < a, b, a) (NaN handling included).
template <class A, class B> IGLU_NP_HOST_DEVICE auto py_max(A a, B b) -> decltype(a + b) {
  typedef decltype(a + b) R;
  return (R(b) > R(a)) ? R(b) : R(a);
}
template <class A, class B> IGLU_NP_HOST_DEVICE auto py_min(A a, B b) -> decltype(a + b) {
  typedef decltype(a + b) R;
  return (R(b) < R(a)) ? R(b) : R(a);
}

// A helper's returned tuple of 2 to 8 values (fields a, b, ..., h): a prepared part may
// hold more than four (xIPReLU's two scalings).
template <class A, class B> struct tup2 { A a; B b; };
template <class A, class B, class C> struct tup3 { A a; B b; C c; };
template <class A, class B, class C, class D> struct tup4 { A a; B b; C c; D d; };
template <class A, class B, class C, class D, class E> struct tup5 { A a; B b; C c; D d; E e; };
template <class A, class B, class C, class D, class E, class F> struct tup6 { A a; B b; C c; D d; E e; F f; };
template <class A, class B, class C, class D, class E, class F, class G> struct tup7 { A a; B b; C c; D d; E e; F f; G g; };
template <class A, class B, class C, class D, class E, class F, class G, class H> struct tup8 { A a; B b; C c; D d; E e; F f; G g; H h; };
template <class A, class B>
IGLU_NP_HOST_DEVICE tup2<A, B> make_tup(A a, B b) {
  tup2<A, B> r = {a, b};
  return r;
}
template <class A, class B, class C>
IGLU_NP_HOST_DEVICE tup3<A, B, C> make_tup(A a, B b, C c) {
  tup3<A, B, C> r = {a, b, c};
  return r;
}
template <class A, class B, class C, class D>
IGLU_NP_HOST_DEVICE tup4<A, B, C, D> make_tup(A a, B b, C c, D d) {
  tup4<A, B, C, D> r = {a, b, c, d};
  return r;
}
template <class A, class B, class C, class D, class E>
IGLU_NP_HOST_DEVICE tup5<A, B, C, D, E> make_tup(A a, B b, C c, D d, E e) {
  tup5<A, B, C, D, E> r = {a, b, c, d, e};
  return r;
}
template <class A, class B, class C, class D, class E, class F>
IGLU_NP_HOST_DEVICE tup6<A, B, C, D, E, F> make_tup(A a, B b, C c, D d, E e, F f) {
  tup6<A, B, C, D, E, F> r = {a, b, c, d, e, f};
  return r;
}
template <class A, class B, class C, class D, class E, class F, class G>
IGLU_NP_HOST_DEVICE tup7<A, B, C, D, E, F, G> make_tup(A a, B b, C c, D d, E e, F f, G g) {
  tup7<A, B, C, D, E, F, G> r = {a, b, c, d, e, f, g};
  return r;
}
template <class A, class B, class C, class D, class E, class F, class G, class H>
IGLU_NP_HOST_DEVICE tup8<A, B, C, D, E, F, G, H> make_tup(A a, B b, C c, D d, E e, F f, G g, H h) {
  tup8<A, B, C, D, E, F, G, H> r = {a, b, c, d, e, f, g, h};
  return r;
}

// _vmath._bits / _from_bits: the IEEE bit pattern as a signed integer of the same width,
// and back (a wider integer is truncated, a narrower one sign-extended, as in Numba).
IGLU_NP_HOST_DEVICE int bits(float x) {
#ifdef IGLU_NP_DEVICE_COMPILE
  return __float_as_int(x);
#else
  int i;
  std::memcpy(&i, &x, sizeof i);
  return i;
#endif
}
IGLU_NP_HOST_DEVICE long long bits(double x) {
#ifdef IGLU_NP_DEVICE_COMPILE
  return __double_as_longlong(x);
#else
  long long i;
  std::memcpy(&i, &x, sizeof i);
  return i;
#endif
}
template <class I> IGLU_NP_HOST_DEVICE float from_bits(I i, float) {
  const int v = (int)i;
#ifdef IGLU_NP_DEVICE_COMPILE
  return __int_as_float(v);
#else
  float x;
  std::memcpy(&x, &v, sizeof x);
  return x;
#endif
}
template <class I> IGLU_NP_HOST_DEVICE double from_bits(I i, double) {
  const long long v = (long long)i;
#ifdef IGLU_NP_DEVICE_COMPILE
  return __longlong_as_double(v);
#else
  double x;
  std::memcpy(&x, &v, sizeof x);
  return x;
#endif
}
IGLU_NP_HOST_DEVICE double inf_d() { return from_bits(0x7FF0000000000000LL, 0.0); }
IGLU_NP_HOST_DEVICE double nan_d() { return from_bits(0x7FF8000000000000LL, 0.0); }

// _math.fma: a*b + c rounded once (std::fma's float overload on the host, CUDA's on the GPU).
// IGLU_NP_NO_EXPLICIT_FMA (also horner's, through this): the tests' build that shows NVRTC
// contracts nothing by itself (its results are not the CPU's).
template <class T> IGLU_NP_HOST_DEVICE T fma_(T a, T b, T c) {
#ifdef IGLU_NP_NO_EXPLICIT_FMA
  return a * b + c;
#else
  return fma(a, b, c);
#endif
}

// ``c0 + c1 v + c2 v^2 + ...`` by Horner's rule, coefficients ascending, each rounded to T
// first: r = T(c[n-1]); r = fma(r, v, T(c[k])) -- the CPU's _vmath.horner, step for step
// (an explicit fma rounds once on both; --fmad=false only stops implicit contraction).
template <class T> IGLU_NP_HOST_DEVICE T horner(T, double c) { return T(c); }

template <class T, class... R>
IGLU_NP_HOST_DEVICE T horner(T v, double c0, double c1, R... rest) {
  return fma_(horner(v, c1, rest...), v, T(c0));
}

}  // namespace iglu_np

#endif  // IGLU_NP_CUH_
