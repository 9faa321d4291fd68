#include "ftcc/tensor/kernels_cpu.hpp"

#include <Eigen/Core>
#include <cmath>

namespace ftcc::tensor::cpu {

namespace {
template <class T>
using MatR = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class T>
using Vec = Eigen::Array<T, Eigen::Dynamic, 1>;
template <class T>
using CMap = Eigen::Map<const MatR<T>, Eigen::Unaligned>;
template <class T>
using MMap = Eigen::Map<MatR<T>, Eigen::Unaligned>;
template <class T>
using CVec = Eigen::Map<const Vec<T>>;
template <class T>
using MVec = Eigen::Map<Vec<T>>;
}  // namespace

template <class T>
void gemm(bool ta, bool tb, i64 m, i64 n, i64 k, const T* a, const T* b, T* c, const T* bias, bool accumulate) {
  MMap<T> C(c, m, n);
  // op(A) is m x k: A itself is k x m when transposed (row-major views of the same buffer).
  CMap<T> A(a, ta ? k : m, ta ? m : k);
  CMap<T> B(b, tb ? n : k, tb ? k : n);
  // Eigen's product kernels handle each transpose combination without materialising it.
  auto run = [&](const auto& lhs, const auto& rhs) {
    if (accumulate) {
      C.noalias() += lhs * rhs;
    } else {
      C.noalias() = lhs * rhs;
    }
  };
  if (!ta && !tb) run(A, B);
  else if (!ta && tb) run(A, B.transpose());
  else if (ta && !tb) run(A.transpose(), B);
  else run(A.transpose(), B.transpose());
  if (bias != nullptr) {
    Eigen::Map<const Eigen::Matrix<T, 1, Eigen::Dynamic>> bv(bias, n);
    C.rowwise() += bv;
  }
}

template <class T>
void binary(int op, i64 n, const T* a, const T* b, T* out) {
  CVec<T> A(a, n), B(b, n);
  MVec<T> O(out, n);
  if (op == 0) O = A + B;
  else if (op == 1) O = A - B;
  else O = A * B;
}

template <class T>
void add_rowvec(i64 rows, i64 cols, const T* a, const T* v, T* out) {
  CMap<T> A(a, rows, cols);
  MMap<T> O(out, rows, cols);
  Eigen::Map<const Eigen::Matrix<T, 1, Eigen::Dynamic>> V(v, cols);
  O = A.rowwise() + V;
}

template <class T>
void colsum(i64 rows, i64 cols, const T* x, T* out, bool accumulate) {
  CMap<T> X(x, rows, cols);
  Eigen::Map<Eigen::Matrix<T, 1, Eigen::Dynamic>> O(out, cols);
  if (accumulate) O += X.colwise().sum();
  else O = X.colwise().sum();
}

template <class T>
void axpy(i64 n, T alpha, const T* x, T* y) {
  MVec<T>(y, n) += alpha * CVec<T>(x, n);
}

template <class T>
void scale_copy(i64 n, T alpha, const T* x, T* out) {
  MVec<T>(out, n) = alpha * CVec<T>(x, n);
}

template <class T>
void unary_forward(int op, i64 n, const T* x, T* y) {
  CVec<T> X(x, n);
  MVec<T> Y(y, n);
  if (op == 0) Y = X.max(T(0));
  else if (op == 1) Y = X.tanh();
  // 1 / (1 + e^-x) overflows gracefully: e^-x = inf gives 0, which is the right limit.
  else Y = T(1) / (T(1) + (-X).exp());
}

template <class T>
void bias_unary(int op, i64 rows, i64 cols, T* y, const T* bias) {
  MMap<T> Y(y, rows, cols);
  if (bias != nullptr) {
    Eigen::Map<const Eigen::Matrix<T, 1, Eigen::Dynamic>> bv(bias, cols);
    if (op == 0) {  // relu: one pass; max is exact, so this is bitwise max(y + b, 0) however it is vectorised
      Y = (Y.rowwise() + bv).cwiseMax(T(0));
      return;
    }
    Y.rowwise() += bv;
  }
  // tanh and sigmoid over the flat buffer, exactly as unary_forward computes them (Eigen's packet
  // and scalar paths differ in the last bit, so the elements must fall into the same packets).
  if (op >= 0) unary_forward<T>(op, rows * cols, y, y);
}

template <class T>
void unary_backward(int op, i64 n, const T* y, const T* gy, T* gx) {
  CVec<T> Y(y, n), GY(gy, n);
  MVec<T> GX(gx, n);
  if (op == 0) GX = (Y > T(0)).select(GY, T(0));
  else if (op == 1) GX = GY * (T(1) - Y * Y);
  else GX = GY * Y * (T(1) - Y);
}

template <class T>
T sum_all(i64 n, const T* x) {
  // Eigen's redux sums in vectorised blocks, which keeps the float32 error well below a naive
  // left-to-right loop for the sizes a loss sees.
  return CVec<T>(x, n).sum();
}

template <class T>
T mse_forward(i64 n, const T* p, const T* t) {
  if (n == 0) return T(0);
  return (CVec<T>(p, n) - CVec<T>(t, n)).square().sum() / T(n);
}

template <class T>
void mse_backward(i64 n, const T* p, const T* t, T g, T* gp) {
  MVec<T>(gp, n) = (T(2) * g / T(n)) * (CVec<T>(p, n) - CVec<T>(t, n));
}

template <class T>
T cross_entropy_forward(i64 rows, i64 cols, const T* x, const T* t, T* lse) {
  Vec<T> loss(rows);
  for (i64 i = 0; i < rows; ++i) {
    CVec<T> xr(x + i * cols, cols), tr(t + i * cols, cols);
    const T m = xr.maxCoeff();
    const T log_s = std::log((xr - m).exp().sum());
    lse[2 * i] = m;
    lse[2 * i + 1] = log_s;
    loss[i] = (tr * (m - xr)).sum() + log_s * tr.sum();
  }
  return loss.sum();
}

template <class T>
void cross_entropy_backward(i64 rows, i64 cols, const T* x, const T* t, const T* lse, T g, T* gx) {
  for (i64 i = 0; i < rows; ++i) {
    CVec<T> xr(x + i * cols, cols), tr(t + i * cols, cols);
    MVec<T>(gx + i * cols, cols) = g * (((xr - lse[2 * i]) - lse[2 * i + 1]).exp() * tr.sum() - tr);
  }
}

// T is a type (float, double): it cannot be parenthesized, the check reads `, T*` as a product.
// NOLINTBEGIN(bugprone-macro-parentheses)
#define FTCC_INSTANTIATE(T)                                                                    \
  template void gemm<T>(bool, bool, i64, i64, i64, const T*, const T*, T*, const T*, bool);     \
  template void binary<T>(int, i64, const T*, const T*, T*);                                    \
  template void add_rowvec<T>(i64, i64, const T*, const T*, T*);                                \
  template void colsum<T>(i64, i64, const T*, T*, bool);                                        \
  template void axpy<T>(i64, T, const T*, T*);                                                  \
  template void scale_copy<T>(i64, T, const T*, T*);                                            \
  template void unary_forward<T>(int, i64, const T*, T*);                                       \
  template void bias_unary<T>(int, i64, i64, T*, const T*);                                     \
  template void unary_backward<T>(int, i64, const T*, const T*, T*);                            \
  template T sum_all<T>(i64, const T*);                                                         \
  template T mse_forward<T>(i64, const T*, const T*);                                           \
  template void mse_backward<T>(i64, const T*, const T*, T, T*);                                \
  template T cross_entropy_forward<T>(i64, i64, const T*, const T*, T*);                        \
  template void cross_entropy_backward<T>(i64, i64, const T*, const T*, const T*, T, T*);
// NOLINTEND(bugprone-macro-parentheses)
FTCC_INSTANTIATE(float)
FTCC_INSTANTIATE(double)
#undef FTCC_INSTANTIATE

}  // namespace ftcc::tensor::cpu
