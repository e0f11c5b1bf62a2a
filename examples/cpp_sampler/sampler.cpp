// replay.exec/1 example sampler in C++17, three builds of one file:
//   default       the founding engine's routing, bug included              (handshake name cpp-greedy-only)
//   -DGUARDED     its small fix: temperature > 0 under drafts refused       (cpp-guarded)
//   -DCONFORMANT  the whole sampling contract of docs/FIXTURES.md: passes all 13 conformance vectors
//                 (cpp-conformant)
//
// Build:   g++ -O2 -std=c++17 -ffp-contract=off -o sampler examples/cpp_sampler/sampler.cpp
//          g++ -O2 -std=c++17 -ffp-contract=off -DGUARDED -o sampler-guarded examples/cpp_sampler/sampler.cpp
//          g++ -O2 -std=c++17 -ffp-contract=off -DCONFORMANT -o sampler-conformant examples/cpp_sampler/sampler.cpp
// Run:     replay run fixtures/real-founding --impl exec:./sampler --against reference
//          replay conformance --impl exec:./sampler-conformant
//
// (-ffp-contract=off: no fused multiply-add, so every float32 expression below (the noise's series and
// uniform, x / t, the softmax, log p, the residual) is the operation sequence the contract states on
// every CPU; baseline x86-64 has no FMA anyway.)
//
// Protocol (docs/EXTERNAL.md): print one JSON handshake line; then for each line on stdin (the path of
// a step file in the fixture step format, docs/FIXTURES.md) print one JSON reply line; exit on EOF.
//
// Routing. Temperature 0 (every build): greedy, filters ignored: argmax (first index on ties); with
// drafts the argmax walk, stopping at the first draft that differs or is -1, the bonus row's argmax when
// all pass. Temperature > 0 (-DCONFORMANT): every row of the request goes through temperature, min-p,
// top-k, top-p (apply_filters); then a Gumbel-max draw with the mrv2 noise (k = 0), or stochastic verify
// (stochastic_walk): accept d iff log p(d) > log u + log q(d) with u the Philox acceptance uniform, else
// draw from the residual and stop; a -1 draft ends verification with a draw from its row; all accepted:
// the bonus draw.
// The founding bug (default): a temperature > 0 request WITH drafts is verified greedily like a
// temperature 0 one; -DGUARDED refuses it by name instead. Both founding builds sample plain
// temperature > 0 requests like -DCONFORMANT but refuse those with top-k / top-p / min-p active ("not
// implemented in this example"), as the founding engine's port did.
//
// Near-ties: the sum of exp is taken left to right, and log / exp / log1p are double results rounded to
// float; torch (the oracle) sums in another order and its fp32 exp may differ in the last ulp. A decision
// whose margin is a few ulp (<= 1e-4 nats: docs/FIXTURES.md, "Near-ties") may therefore differ from the
// oracle; `replay run` tolerates those, and the conformance vectors hold none.
//
// The file holds its own minimal safetensors reader: 8-byte little-endian header length, a JSON
// header, raw little-endian tensor bytes. Logits: F32, BF16, F16; integers: I32, I64.

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <limits>
#include <map>
#include <set>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

// ---------------------------------------------------------------- minimal JSON (header only)

struct Json {
  enum Kind { Null, Bool, Number, String, Array, Object } kind = Null;
  double number = 0;
  std::string text;
  std::vector<Json> items;
  std::map<std::string, Json> fields;
  const Json& at(const std::string& key) const {
    auto it = fields.find(key);
    if (kind != Object || it == fields.end()) throw std::runtime_error("header lacks '" + key + "'");
    return it->second;
  }
};

class JsonParser {
 public:
  explicit JsonParser(const std::string& s) : s_(s) {}
  Json parse() {
    Json v = value();
    skip_ws();
    if (i_ != s_.size()) fail("trailing characters");
    return v;
  }

 private:
  const std::string& s_;
  size_t i_ = 0;
  [[noreturn]] void fail(const char* what) {
    throw std::runtime_error(std::string("bad safetensors header JSON: ") + what);
  }
  void skip_ws() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\n' || s_[i_] == '\r' || s_[i_] == '\t')) ++i_;
  }
  char peek() { skip_ws(); if (i_ >= s_.size()) fail("unexpected end"); return s_[i_]; }
  void expect(char c) { if (peek() != c) fail("unexpected character"); ++i_; }
  Json value() {
    char c = peek();
    Json v;
    if (c == '{') {
      v.kind = Json::Object; ++i_;
      if (peek() == '}') { ++i_; return v; }
      for (;;) {
        Json key = string_value();
        expect(':');
        v.fields[key.text] = value();
        if (peek() == ',') { ++i_; continue; }
        expect('}');
        return v;
      }
    }
    if (c == '[') {
      v.kind = Json::Array; ++i_;
      if (peek() == ']') { ++i_; return v; }
      for (;;) {
        v.items.push_back(value());
        if (peek() == ',') { ++i_; continue; }
        expect(']');
        return v;
      }
    }
    if (c == '"') return string_value();
    if (s_.compare(i_, 4, "true") == 0) { i_ += 4; v.kind = Json::Bool; v.number = 1; return v; }
    if (s_.compare(i_, 5, "false") == 0) { i_ += 5; v.kind = Json::Bool; return v; }
    if (s_.compare(i_, 4, "null") == 0) { i_ += 4; return v; }
    size_t start = i_;
    while (i_ < s_.size() && std::strchr("+-0123456789.eE", s_[i_])) ++i_;
    if (start == i_) fail("unexpected character");
    v.kind = Json::Number;
    v.number = std::stod(s_.substr(start, i_ - start));
    return v;
  }
  Json string_value() {
    expect('"');
    Json v;
    v.kind = Json::String;
    while (i_ < s_.size() && s_[i_] != '"') {
      char c = s_[i_++];
      if (c == '\\') {  // escapes are kept verbatim except \" and \\ (only the metadata string has any)
        if (i_ >= s_.size()) fail("unexpected end");
        char e = s_[i_++];
        if (e == 'u') { v.text += "\\u"; continue; }
        v.text += (e == 'n') ? '\n' : (e == 't') ? '\t' : e;
        continue;
      }
      v.text += c;
    }
    if (i_ >= s_.size()) fail("unterminated string");
    ++i_;
    return v;
  }
};

// ---------------------------------------------------------------- minimal safetensors reader

struct Tensor {
  std::string dtype;
  std::vector<int64_t> shape;
  const unsigned char* data = nullptr;
  size_t nbytes = 0;
  int64_t numel() const { int64_t n = 1; for (auto d : shape) n *= d; return n; }
};

float bf16_to_float(uint16_t h) {
  uint32_t bits = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

float f16_to_float(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000) << 16, exp = (h >> 10) & 0x1F, mant = h & 0x3FF, bits;
  if (exp == 0x1F) {
    bits = sign | 0x7F800000u | (mant << 13);  // inf / nan
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  } else if (mant == 0) {
    bits = sign;  // +-0
  } else {        // subnormal: normalise
    int e = -1;
    do { ++e; mant <<= 1; } while ((mant & 0x400) == 0);
    bits = sign | (uint32_t(112 - e) << 23) | ((mant & 0x3FF) << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

class SafeTensors {
 public:
  explicit SafeTensors(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw std::runtime_error("cannot open " + path);
    bytes_.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    if (bytes_.size() < 8) throw std::runtime_error(path + ": shorter than the 8-byte header length");
    uint64_t n = 0;
    for (int b = 7; b >= 0; --b) n = (n << 8) | static_cast<unsigned char>(bytes_[b]);
    if (n > bytes_.size() - 8) throw std::runtime_error(path + ": header length past the end of the file");
    header_ = JsonParser(std::string(bytes_.data() + 8, n)).parse();
    data_start_ = 8 + n;
  }
  bool has(const std::string& name) const { return header_.fields.count(name) != 0; }
  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (const auto& kv : header_.fields) out.push_back(kv.first);
    return out;
  }
  Tensor get(const std::string& name) const {
    const Json& h = header_.at(name);
    Tensor t;
    t.dtype = h.at("dtype").text;
    for (const Json& d : h.at("shape").items) t.shape.push_back(static_cast<int64_t>(d.number));
    size_t a = static_cast<size_t>(h.at("data_offsets").items.at(0).number);
    size_t b = static_cast<size_t>(h.at("data_offsets").items.at(1).number);
    if (a > b || data_start_ + b > bytes_.size()) throw std::runtime_error("tensor '" + name + "' past the end");
    t.data = reinterpret_cast<const unsigned char*>(bytes_.data()) + data_start_ + a;
    t.nbytes = b - a;
    size_t width = (t.dtype == "F32" || t.dtype == "I32") ? 4 : (t.dtype == "I64") ? 8
                 : (t.dtype == "BF16" || t.dtype == "F16") ? 2 : (t.dtype == "I8") ? 1 : 0;
    if (width == 0) throw std::runtime_error("tensor '" + name + "': unsupported dtype " + t.dtype);
    if (t.nbytes != width * static_cast<size_t>(t.numel()))
      throw std::runtime_error("tensor '" + name + "': byte size does not match its shape");
    return t;
  }
  std::vector<float> floats(const std::string& name) const {
    Tensor t = get(name);
    std::vector<float> out(static_cast<size_t>(t.numel()));
    for (size_t i = 0; i < out.size(); ++i) {
      if (t.dtype == "F32") { std::memcpy(&out[i], t.data + 4 * i, 4); continue; }
      uint16_t h = uint16_t(t.data[2 * i] | (t.data[2 * i + 1] << 8));
      if (t.dtype == "BF16") out[i] = bf16_to_float(h);
      else if (t.dtype == "F16") out[i] = f16_to_float(h);
      else throw std::runtime_error("tensor '" + name + "': expected F32, BF16 or F16, got " + t.dtype);
    }
    return out;
  }
  std::vector<int64_t> ints(const std::string& name) const {
    Tensor t = get(name);
    std::vector<int64_t> out(static_cast<size_t>(t.numel()));
    for (size_t i = 0; i < out.size(); ++i) {
      if (t.dtype == "I64") { std::memcpy(&out[i], t.data + 8 * i, 8); continue; }
      if (t.dtype == "I8") { out[i] = static_cast<int8_t>(t.data[i]); continue; }
      if (t.dtype != "I32") throw std::runtime_error("tensor '" + name + "': expected I8, I32 or I64, got " + t.dtype);
      int32_t v;
      std::memcpy(&v, t.data + 4 * i, 4);
      out[i] = v;
    }
    return out;
  }

 private:
  std::vector<char> bytes_;
  Json header_;
  size_t data_start_ = 0;
};

// ---------------------------------------------------------------- mrv2 noise (docs/FIXTURES.md, "RNG contract")

uint32_t rotl32(uint32_t x, int r) { return (x << r) | (x >> (32 - r)); }

uint32_t murmur_mix(uint32_t h, uint32_t k) {
  k *= 0xCC9E2D51u;
  k = rotl32(k, 15);
  k *= 0x1B873593u;
  h = rotl32(h ^ k, 13);
  return h * 5u + 0xE6546B64u;
}

uint32_t murmur_fmix(uint32_t h) {
  h ^= h >> 16; h *= 0x85EBCA6Bu; h ^= h >> 13; h *= 0xC2B2AE35u; h ^= h >> 16;
  return h;
}

// fp32 log / exp / log1p evaluated in double and rounded to float: the correctly rounded value (up to
// double rounding, far below the near-tie margin), as the torch oracle's log does (replay_harness/oracle/rng.py).
float log_f32(float x) { return static_cast<float>(std::log(static_cast<double>(x))); }
float exp_f32(float x) { return static_cast<float>(std::exp(static_cast<double>(x))); }
float log1p_f32(float x) { return static_cast<float>(std::log1p(static_cast<double>(x))); }

float gumbel_noise(int64_t seed, int64_t pos, uint32_t token) {
  uint64_t s = static_cast<uint64_t>(seed);
  uint32_t h = murmur_mix(0u, static_cast<uint32_t>(s));
  h = murmur_mix(h, static_cast<uint32_t>(s >> 32));
  h = murmur_mix(h, static_cast<uint32_t>(static_cast<uint64_t>(pos)));  // low word of the position only
  h = murmur_mix(h, token);
  h = murmur_fmix(h ^ 16u);
  float u = static_cast<float>(h >> 16) * 1.52587890625e-05f +
            (static_cast<float>(h & 0xFFFFu) + 0.5f) * 2.3283064365386963e-10f;  // (0, 1]
  float log1m;  // log(1 - u): degree-8 series below 0.25 (Horner, float32), else direct
  if (u < 0.25f) {
    float poly = 0.125f;
    for (int k = 7; k >= 1; --k) poly = static_cast<float>(1.0 / k) + u * poly;
    log1m = -u * poly;
  } else {
    float one_minus = 1.0f - u;
    log1m = log_f32(one_minus < 5.960464477539063e-08f ? 5.960464477539063e-08f : one_minus);  // 2^-24 clamp
  }
  return -log_f32(-log1m);
}

// The acceptance uniform of a verify row: Philox-4x32-10 keyed by the seed's words, counter (pos_lo,
// pos_hi, 0, 0); the output word c0 read as int32, ~x when negative, times fp32(4.6566127342e-10), at
// least that constant (never 0).
float accept_uniform(int64_t seed, int64_t pos) {
  const uint64_t s = static_cast<uint64_t>(seed), p = static_cast<uint64_t>(pos);
  uint32_t k0 = static_cast<uint32_t>(s), k1 = static_cast<uint32_t>(s >> 32);
  uint32_t c0 = static_cast<uint32_t>(p), c1 = static_cast<uint32_t>(p >> 32), c2 = 0, c3 = 0;
  for (int round = 0; round < 10; ++round) {
    const uint64_t b = uint64_t(c2) * 0xCD9E8D57u, a = uint64_t(c0) * 0xD2511F53u;
    const uint32_t hi_b = static_cast<uint32_t>(b >> 32), lo_b = static_cast<uint32_t>(b);
    const uint32_t hi_a = static_cast<uint32_t>(a >> 32), lo_a = static_cast<uint32_t>(a);
    c0 = hi_b ^ c1 ^ k0;
    c1 = lo_b;
    c2 = hi_a ^ c3 ^ k1;
    c3 = lo_a;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  int32_t x = static_cast<int32_t>(c0);  // two's complement (C++20 guarantees it; every C++17 target does it)
  if (x < 0) x = ~x;
  const float scale = 4.6566127342e-10f;
  const float u = static_cast<float>(x) * scale;  // int -> fp32 rounds to nearest even
  return u < scale ? scale : u;
}

// ---------------------------------------------------------------- sampling (docs/FIXTURES.md, "Sampling rules")

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

int64_t argmax_first(const float* x, int64_t n) {  // first index on ties, NaN as -inf
  int64_t best = 0;
  float best_v = kNegInf;
  for (int64_t i = 0; i < n; ++i) {
    float v = std::isnan(x[i]) ? kNegInf : x[i];
    if (v > best_v) { best_v = v; best = i; }
  }
  return best;
}

float max_of(const float* x, int64_t n) {
  float m = kNegInf;
  for (int64_t i = 0; i < n; ++i) m = x[i] > m ? x[i] : m;
  return m;
}

// m + log(sum exp(x - m)), m = max x, left-to-right float sum (-inf entries add 0; all -inf gives -inf).
float logsumexp(const float* x, int64_t n) {
  const float m = max_of(x, n);
  if (m == kNegInf) return m;
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) sum += exp_f32(x[i] - m);
  return m + log_f32(sum);
}

// Does this request's row change under its parameters? (t > 0 and not: t = 1 with every filter off)
bool filters_active(float t, int64_t k, float top_p, float min_p, int64_t V) {
  return t != 0.0f && (t != 1.0f || min_p != 0.0f || k != V || top_p != 1.0f);
}

// One row, in place: temperature, min-p, top-k, top-p (k in [1, V]: 0 or > V already mapped to V).
void apply_filters(float* x, int64_t V, float t, int64_t k, float top_p, float min_p) {
  if (!filters_active(t, k, top_p, min_p, V)) return;
  if (t != 1.0f)
    for (int64_t v = 0; v < V; ++v) x[v] = x[v] / t;
  if (min_p != 0.0f) {
    const float bound = max_of(x, V) + log_f32(min_p);
    for (int64_t v = 0; v < V; ++v)
      if (x[v] < bound) x[v] = kNegInf;  // tokens AT the bound are kept
  }
  if (k == V && top_p == 1.0f) return;
  std::vector<int64_t> order(static_cast<size_t>(V));
  for (int64_t v = 0; v < V; ++v) order[v] = v;
  std::stable_sort(order.begin(), order.end(), [x](int64_t a, int64_t b) { return x[a] < x[b]; });
  std::vector<float> sorted(static_cast<size_t>(V));
  for (int64_t i = 0; i < V; ++i) sorted[i] = x[order[i]];
  const float kth = sorted[V - k];
  for (int64_t i = 0; i < V; ++i)
    if (sorted[i] < kth) sorted[i] = kNegInf;  // ties at the k-th value survive
  if (top_p != 1.0f) {
    // softmax of the ascending row (exp(x - max) / sum), then its cumulative sum, left to right, fp32
    const float m = sorted[V - 1];
    std::vector<float> e(static_cast<size_t>(V));
    float sum = 0.0f;
    for (int64_t i = 0; i < V; ++i) { e[i] = exp_f32(sorted[i] - m); sum += e[i]; }
    const float cut = 1.0f - top_p;
    float cum = 0.0f;
    for (int64_t i = 0; i + 1 < V; ++i) {  // the last (largest) entry is always kept
      cum += e[i] / sum;
      if (cum <= cut) sorted[i] = kNegInf;
    }
  }
  for (int64_t i = 0; i < V; ++i) x[order[i]] = sorted[i];
}

// A Gumbel-max draw from unnormalised log-probabilities z [V] at (seed, pos).
int64_t gumbel_draw(const float* z, int64_t V, int64_t seed, int64_t pos, std::vector<float>& scores) {
  for (int64_t v = 0; v < V; ++v) scores[v] = z[v] + gumbel_noise(seed, pos, static_cast<uint32_t>(v));
  return argmax_first(scores.data(), V);
}

// Greedy verify over rows [k+1, V]: argmax walk, stop at the first draft that differs or is -1.
std::vector<int64_t> greedy_walk(const float* rows, const int64_t* drafts, int64_t k, int64_t V) {
  std::vector<int64_t> out;
  for (int64_t i = 0; i < k; ++i) {
    out.push_back(argmax_first(rows + i * V, V));
    if (drafts[i] < 0 || out.back() != drafts[i]) return out;
  }
  out.push_back(argmax_first(rows + k * V, V));
  return out;
}

// Stochastic verify over processed rows z [k+1, V]; draft [k, V] pre-temperature draft logits or null.
std::vector<int64_t> stochastic_walk(const float* z, const int64_t* drafts, const int64_t* pos, int64_t k,
                                     int64_t V, float t, int64_t seed, const float* draft) {
  std::vector<int64_t> out;
  std::vector<float> scores(static_cast<size_t>(V)), q(static_cast<size_t>(V)), res(static_cast<size_t>(V));
  for (int64_t i = 0; i < k; ++i) {
    const float* zi = z + i * V;
    const int64_t d = drafts[i];
    if (d < 0) {  // placeholder: verification ends, a draw from this row's target
      out.push_back(gumbel_draw(zi, V, seed, pos[i], scores));
      return out;
    }
    const float lse_p = logsumexp(zi, V);
    float lse_q = 0.0f, log_q = 0.0f;  // one-hot draft: log q(d) = 0
    if (draft) {
      for (int64_t v = 0; v < V; ++v) q[v] = draft[i * V + v] / t;  // no filters on the draft
      lse_q = logsumexp(q.data(), V);
      log_q = q[d] - lse_q;
    }
    const float log_p = zi[d] - lse_p;
    if (log_p > log_f32(accept_uniform(seed, pos[i])) + log_q) {
      out.push_back(d);
      continue;
    }
    std::copy(zi, zi + V, res.begin());  // residual max(p - q, 0), as log-probabilities
    if (!draft) {
      res[d] = kNegInf;
    } else {
      for (int64_t v = 0; v < V; ++v) {
        const float lp = zi[v] - lse_p, ratio = exp_f32((q[v] - lse_q) - lp);  // NaN (both -inf): dropped
        res[v] = ratio < 1.0f ? lp + log1p_f32(-ratio) : kNegInf;
      }
    }
    out.push_back(gumbel_draw(res.data(), V, seed, pos[i], scores));
    return out;
  }
  out.push_back(gumbel_draw(z + k * V, V, seed, pos[k], scores));
  return out;
}

// Which build: the founding bug (default), its guarded fix (-DGUARDED) or the contract (-DCONFORMANT).
enum class Build { GreedyOnly, Guarded, Conformant };
#if defined(CONFORMANT)
constexpr Build kBuild = Build::Conformant;
#elif defined(GUARDED)
constexpr Build kBuild = Build::Guarded;
#else
constexpr Build kBuild = Build::GreedyOnly;
#endif

struct Reply {
  std::vector<std::vector<int64_t>> tokens;
  std::vector<int64_t> counts;
  std::vector<std::string> routes, notes;
  double kernel_us = 0;
};

std::string join_ids(const std::vector<int64_t>& ids) {
  std::string s;
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? ", " : "") + std::to_string(ids[i]);
  return s;
}

Reply sample_step(const SafeTensors& st) {
  Tensor lt = st.get("logits");
  if (lt.shape.size() != 2) throw std::runtime_error("logits must be 2-D");
  const int64_t V = lt.shape[1];
  std::vector<float> logits = st.floats("logits");
  std::vector<int64_t> cu = st.ints("cu_num_logits"), drafts = st.ints("draft_token_ids"),
                       pos = st.ints("positions"), top_k = st.ints("top_k"), seed = st.ints("seed"),
                       ids = st.ints("request_ids");
  std::vector<float> temp = st.floats("temperature"), top_p = st.floats("top_p"), min_p = st.floats("min_p");
  const bool has_draft_logits = st.has("draft_logits");
  std::vector<float> draft_logits;
  if (has_draft_logits) draft_logits = st.floats("draft_logits");
  const size_t R = cu.size() - 1;
  int64_t K = 0;
  for (size_t r = 0; r < R; ++r) K = std::max<int64_t>(K, cu[r + 1] - cu[r] - 1);

  // The inputs of schema minor 1 are all this example implements. A step holding any other input (the sampling
  // pipeline's processors, grammar masks or logprob requests; docs/FIXTURES.md "The sampling pipeline") is refused
  // whole, naming the fields, and a request verified by another method than the standard one ("Verification
  // methods") is refused alone: never sampled as if the field were absent.
  static const std::set<std::string> kMinor1 = {"logits", "cu_num_logits", "draft_token_ids", "positions",
                                                "temperature", "top_k", "top_p", "min_p", "seed", "request_ids",
                                                "draft_logits", "__metadata__", "draft_sampling"};
  std::string pipeline;
  for (const std::string& name : st.names())
    if (!kMinor1.count(name) && name.rfind("emitted_", 0) != 0 && name.rfind("cu_", 0) != 0 &&
        name != "verify_method" && name.rfind("fly_", 0) != 0)
      pipeline += (pipeline.empty() ? "" : ", ") + name;
  std::vector<int64_t> method(R, 0);
  if (st.has("verify_method")) method = st.ints("verify_method");

  auto t0 = std::chrono::steady_clock::now();
  Reply rep;
  std::vector<int64_t> refused_t, refused_filters, refused_method;
  std::vector<float> z;
  for (size_t r = 0; r < R; ++r) {
    std::vector<int64_t> out;
    const int64_t a = cu[r], k = cu[r + 1] - cu[r] - 1;
    const float t = temp[r];
    const int64_t top = (top_k[r] <= 0 || top_k[r] > V) ? V : top_k[r];
    const bool filtered = top != V || top_p[r] != 1.0f || min_p[r] != 0.0f;
    std::string route;
    if (!pipeline.empty()) {
      route = "refused";
    } else if (method[r] != 0 && k > 0) {
      route = "refused";
      refused_method.push_back(ids[r]);
    } else if (t == 0.0f) {  // greedy: raw logits, filters ignored
      route = k > 0 ? "greedy-verify" : "greedy-sample";
      out = greedy_walk(&logits[a * V], &drafts[a], k, V);
    } else if (k > 0 && kBuild == Build::GreedyOnly) {  // the founding bug: greedy verify at t > 0
      route = "greedy-verify";
      out = greedy_walk(&logits[a * V], &drafts[a], k, V);
    } else if (k > 0 && kBuild == Build::Guarded) {
      route = "refused";
      refused_t.push_back(ids[r]);
    } else if (k == 0 && filtered && kBuild != Build::Conformant) {
      route = "refused";
      refused_filters.push_back(ids[r]);
    } else {  // t > 0: filters on every row of the request, then Gumbel draws / stochastic verify
      route = k > 0 ? "stochastic-verify" : "random-sample";
      z.assign(logits.begin() + a * V, logits.begin() + (a + k + 1) * V);
      for (int64_t i = 0; i <= k; ++i) apply_filters(&z[i * V], V, t, top, top_p[r], min_p[r]);
      const float* draft = has_draft_logits ? &draft_logits[(a - static_cast<int64_t>(r)) * V] : nullptr;
      out = stochastic_walk(z.data(), &drafts[a], &pos[a], k, V, t, seed[r], draft);
    }
    rep.counts.push_back(static_cast<int64_t>(out.size()));
    out.resize(static_cast<size_t>(K + 1), -1);
    rep.tokens.push_back(out);
    rep.routes.push_back(route);
  }
  rep.kernel_us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
  if (!pipeline.empty())
    rep.notes.push_back("refused every request: the sampling pipeline's inputs (" + pipeline +
                        ") are not implemented in this example");
  if (!refused_method.empty())
    rep.notes.push_back("refused requests " + join_ids(refused_method) +
                        ": only the standard verification method is implemented in this example");
  if (!refused_t.empty())
    rep.notes.push_back("refused requests " + join_ids(refused_t) +
                        ": temperature > 0 under speculative decoding needs a stochastic verifier");
  if (!refused_filters.empty())
    rep.notes.push_back("refused requests " + join_ids(refused_filters) +
                        ": top-k/top-p/min-p not implemented in this example");
  return rep;
}

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') { out += '\\'; out += c; }
    else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string to_json(const Reply& rep) {
  std::ostringstream o;
  o << "{\"tokens\":[";
  for (size_t r = 0; r < rep.tokens.size(); ++r) {
    o << (r ? ",[" : "[");
    for (size_t j = 0; j < rep.tokens[r].size(); ++j) o << (j ? "," : "") << rep.tokens[r][j];
    o << "]";
  }
  o << "],\"counts\":[";
  for (size_t r = 0; r < rep.counts.size(); ++r) o << (r ? "," : "") << rep.counts[r];
  o << "],\"routes\":[";
  for (size_t r = 0; r < rep.routes.size(); ++r) o << (r ? "," : "") << json_string(rep.routes[r]);
  o << "],\"notes\":[";
  for (size_t i = 0; i < rep.notes.size(); ++i) o << (i ? "," : "") << json_string(rep.notes[i]);
  o << "],\"kernel_us\":" << rep.kernel_us << "}";
  return o.str();
}

}  // namespace

int main() {
  const char* name = kBuild == Build::Conformant ? "cpp-conformant"
                     : kBuild == Build::Guarded  ? "cpp-guarded" : "cpp-greedy-only";
  const char* what = kBuild == Build::Conformant ? "C++ example: the full sampling contract"
                                                 : "C++ example: the founding engine's routing";
  std::cout << "{\"protocol\":\"replay.exec/1\",\"name\":\"" << name
            << "\",\"rng_contract\":\"mrv2\",\"description\":\"" << what << "\"}"
            << std::endl;  // std::endl flushes: the harness waits for this line
  std::string path;
  while (std::getline(std::cin, path)) {
    try {
      std::cout << to_json(sample_step(SafeTensors(path))) << std::endl;
    } catch (const std::exception& e) {
      std::cout << "{\"error\":" << json_string(e.what()) << "}" << std::endl;
    }
  }
  return 0;
}
