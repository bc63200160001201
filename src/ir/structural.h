// Generic structural equality and hashing over types that declare `for_each_field` (private to
// src/ir: expr.cpp and ir.cpp use it). Handles arithmetic values and enums, strings, doubles (by
// bit pattern, so -0.0 != 0.0 and a NaN equals itself), vectors, variants and shared_ptrs (compared
// by pointee, so two equal buffers reached through different pointers are equal).
#pragma once
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

namespace pypto::ir::structural {

struct AnyField {
  template <class U>
  void operator()(const U&) const {}
};
template <class T, class = void>
struct has_fields : std::false_type {};
template <class T>
struct has_fields<T, std::void_t<decltype(std::declval<const T&>().for_each_field(AnyField{}))>>
    : std::true_type {};

template <class T>
struct is_vector : std::false_type {};
template <class T, class A>
struct is_vector<std::vector<T, A>> : std::true_type {};
template <class T>
struct is_shared : std::false_type {};
template <class T>
struct is_shared<std::shared_ptr<T>> : std::true_type {};
template <class T>
struct is_variant : std::false_type {};
template <class... T>
struct is_variant<std::variant<T...>> : std::true_type {};

inline uint64_t double_bits(double d) {
  uint64_t u;
  std::memcpy(&u, &d, sizeof u);
  return u;
}

template <class T>
bool equal(const T& a, const T& b);

// Fields are compared pairwise by position: for the i-th field of `a`, walk `b`'s fields to its
// i-th one. Quadratic in the (small, fixed) field count but needs nothing beyond the field list.
template <class T>
bool equal_fields(const T& a, const T& b) {
  bool ok = true;
  int i = 0;
  a.for_each_field([&](const auto& fa) {
    if (ok) {
      int j = 0;
      b.for_each_field([&](const auto& fb) {
        if (j++ != i) return;
        using A = std::decay_t<decltype(fa)>;
        using B = std::decay_t<decltype(fb)>;
        if constexpr (std::is_same_v<A, B>) ok = equal(fa, fb);
      });
    }
    ++i;
  });
  return ok;
}

template <class T>
bool equal(const T& a, const T& b) {
  if constexpr (std::is_same_v<T, double> || std::is_same_v<T, float>) {
    return double_bits(a) == double_bits(b);
  } else if constexpr (std::is_arithmetic_v<T> || std::is_enum_v<T> || std::is_same_v<T, std::string>) {
    return a == b;
  } else if constexpr (is_vector<T>::value) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i)
      if (!equal(a[i], b[i])) return false;
    return true;
  } else if constexpr (is_shared<T>::value) {
    if (a.get() == b.get()) return true;
    if (!a || !b) return false;
    return equal(*a, *b);
  } else if constexpr (is_variant<T>::value) {
    if (a.index() != b.index()) return false;
    return std::visit(
        [&](const auto& va) {
          using V = std::decay_t<decltype(va)>;
          return equal(va, std::get<V>(b));
        },
        a);
  } else {
    static_assert(has_fields<T>::value, "structural::equal: type has no for_each_field");
    return equal_fields(a, b);
  }
}

inline void mix(size_t& h, size_t v) { h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2); }

template <class T>
void hash_into(size_t& h, const T& a) {
  if constexpr (std::is_same_v<T, double> || std::is_same_v<T, float>) {
    mix(h, std::hash<uint64_t>{}(double_bits(a)));
  } else if constexpr (std::is_enum_v<T>) {
    mix(h, std::hash<uint64_t>{}(uint64_t(a)));
  } else if constexpr (std::is_arithmetic_v<T>) {
    mix(h, std::hash<T>{}(a));
  } else if constexpr (std::is_same_v<T, std::string>) {
    mix(h, std::hash<std::string>{}(a));
  } else if constexpr (is_vector<T>::value) {
    mix(h, a.size());
    for (const auto& x : a) hash_into(h, x);
  } else if constexpr (is_shared<T>::value) {
    if (!a) {
      mix(h, 0x5eed);
    } else {
      hash_into(h, *a);
    }
  } else if constexpr (is_variant<T>::value) {
    mix(h, a.index());
    std::visit([&](const auto& va) { hash_into(h, va); }, a);
  } else {
    static_assert(has_fields<T>::value, "structural::hash: type has no for_each_field");
    a.for_each_field([&](const auto& f) { hash_into(h, f); });
  }
}

template <class T>
size_t hash(const T& a) {
  size_t h = 0;
  hash_into(h, a);
  return h;
}

}  // namespace pypto::ir::structural
