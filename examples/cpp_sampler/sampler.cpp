// replay.exec/1 example sampler in C++17: the founding engine's routing, bug included.
//
// Build:   g++ -O2 -std=c++17 -ffp-contract=off -o sampler examples/cpp_sampler/sampler.cpp
//          g++ -O2 -std=c++17 -ffp-contract=off -DGUARDED -o sampler-guarded examples/cpp_sampler/sampler.cpp
// Run:     replay run fixtures/real-founding --impl exec:./sampler --against reference
//
// (-ffp-contract=off: no fused multiply-add, so the float32 arithmetic of the mrv2 noise is the
// same operation sequence as the torch oracle on every CPU; baseline x86-64 has no FMA anyway.)
//
// Protocol (docs/EXTERNAL.md): print one JSON handshake line; then for each line on stdin (the path of
// a step file in the fixture step format, docs/FIXTURES.md) print one JSON reply line; exit on EOF.
//
// Routing (the founding bug): every request WITH drafts is verified greedily, whatever its
// temperature: argmax walk over the raw logits (first index on ties), stop at the first draft that
// differs or is -1, emit the bonus row's argmax when all pass. Requests WITHOUT drafts: temperature 0
// -> argmax; temperature > 0 -> Gumbel-max over logits / temperature with the mrv2 noise
// (murmur3-style hash of (seed, position, token)). Plain requests with top-k / top-p / min-p active
// are refused ("not implemented in this example").
// -DGUARDED: the small fix; a temperature > 0 request with drafts is refused by name instead.
//
// The file holds its own minimal safetensors reader: 8-byte little-endian header length, a JSON
// header, raw little-endian tensor bytes. Logits: F32, BF16, F16; integers: I32, I64.

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <limits>
#include <map>
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
      if (t.dtype != "I32") throw std::runtime_error("tensor '" + name + "': expected I32 or I64, got " + t.dtype);
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

// ---------------------------------------------------------------- mrv2 Gumbel noise

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

// log evaluated in double and rounded to float, as the torch oracle (replay_harness/oracle/rng.py) does.
float log_f32(float x) { return static_cast<float>(std::log(static_cast<double>(x))); }

float gumbel_noise(int64_t seed, int64_t pos, uint32_t token) {
  uint64_t s = static_cast<uint64_t>(seed);
  uint32_t h = murmur_mix(0u, static_cast<uint32_t>(s));
  h = murmur_mix(h, static_cast<uint32_t>(s >> 32));
  h = murmur_mix(h, static_cast<uint32_t>(static_cast<uint64_t>(pos)));
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
    log1m = log_f32(one_minus < 5.960464477539063e-08f ? 5.960464477539063e-08f : one_minus);
  }
  return -log_f32(-log1m);
}

// ---------------------------------------------------------------- sampling

int64_t argmax_first(const float* x, int64_t n) {  // first index on ties, NaN as -inf
  int64_t best = 0;
  float best_v = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < n; ++i) {
    float v = std::isnan(x[i]) ? -std::numeric_limits<float>::infinity() : x[i];
    if (v > best_v) { best_v = v; best = i; }
  }
  return best;
}

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
  const size_t R = cu.size() - 1;
  int64_t K = 0;
  for (size_t r = 0; r < R; ++r) K = std::max<int64_t>(K, cu[r + 1] - cu[r] - 1);

  auto t0 = std::chrono::steady_clock::now();
  Reply rep;
  std::vector<int64_t> refused_t, refused_filters;
  std::vector<float> scores(static_cast<size_t>(V));
  for (size_t r = 0; r < R; ++r) {
    std::vector<int64_t> out;
    const int64_t a = cu[r], k = cu[r + 1] - cu[r] - 1;
    std::string route;
    if (k > 0) {
#ifdef GUARDED
      if (temp[r] != 0.0f) { refused_t.push_back(ids[r]); route = "refused"; }
#endif
      if (route.empty()) {  // the bug: greedy verify whatever the temperature
        route = "greedy-verify";
        bool all_pass = true;
        for (int64_t i = 0; i < k; ++i) {
          int64_t best = argmax_first(&logits[(a + i) * V], V);
          out.push_back(best);
          if (drafts[a + i] < 0 || best != drafts[a + i]) { all_pass = false; break; }
        }
        if (all_pass) out.push_back(argmax_first(&logits[(a + k) * V], V));
      }
    } else if (temp[r] == 0.0f) {
      route = "greedy-sample";
      out.push_back(argmax_first(&logits[a * V], V));
    } else if ((top_k[r] > 0 && top_k[r] < V) || top_p[r] != 1.0f || min_p[r] != 0.0f) {
      route = "refused";
      refused_filters.push_back(ids[r]);
    } else {
      route = "random-sample";
      const float* row = &logits[a * V];
      for (int64_t v = 0; v < V; ++v) {
        float x = temp[r] == 1.0f ? row[v] : row[v] / temp[r];
        scores[v] = x + gumbel_noise(seed[r], pos[a], static_cast<uint32_t>(v));
      }
      out.push_back(argmax_first(scores.data(), V));
    }
    rep.counts.push_back(static_cast<int64_t>(out.size()));
    out.resize(static_cast<size_t>(K + 1), -1);
    rep.tokens.push_back(out);
    rep.routes.push_back(route);
  }
  rep.kernel_us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
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
#ifdef GUARDED
  const char* name = "cpp-guarded";
#else
  const char* name = "cpp-greedy-only";
#endif
  std::cout << "{\"protocol\":\"replay.exec/1\",\"name\":\"" << name
            << "\",\"rng_contract\":\"mrv2\",\"description\":\"C++ example: the founding engine's routing\"}"
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
