// replay_recorder.hpp: a single-header, dependency-free C++17 writer of the replay fixture format
// (docs/FIXTURES.md: `replay.recording/1`, `replay.step/1`, schema minor 2). POSIX only (open/fsync/rename).
//
//   #include "replay_recorder.hpp"
//   replay::RecordingWriter rec("out/rec", /*vocab_size=*/V, R"({"engine":"my-engine"})");
//   replay::Step s;                                   // one decode step, tensors by fixture name
//   s.f32("logits", {N, V}, logits);                  // float32 (or s.bf16 / s.f16 with raw uint16 bits)
//   s.i32("cu_num_logits", {R + 1}, cu);  s.i32("draft_token_ids", {N}, drafts);
//   s.i64("positions", {N}, pos);         s.f32("temperature", {R}, t);  s.i32("top_k", {R}, k);
//   s.f32("top_p", {R}, p);  s.f32("min_p", {R}, mp);  s.i64("seed", {R}, seed);  s.i64("request_ids", {R}, ids);
//   s.i32("emitted_tokens", {R, K + 1}, toks);  s.i32("emitted_counts", {R}, counts);
//   s.i8("emitted_routes", {R}, routes);              // optional
//   rec.write_step(s);                                // streamed: temp file, fsync, rename
//   rec.close();                                      // manifest: complete, num_steps, digest
//
// Schema minor 2, the sampling pipeline (docs/FIXTURES.md, "The sampling pipeline"), from plain containers:
//   std::vector<replay::RequestPipeline> p(R);        // one per request: penalties, min_tokens, lists, grammar
//   p[0].repetition_penalty = 1.3f;  p[0].output_token_ids = {5, 3};  p[0].bad_words = {{3, 7}};
//   p[1].has_grammar = true;  p[1].grammar_rows = {{0, 2, 3, 5}};     // allowed ids of each of its rows
//   s.pipeline(p, cu, V);                             // the fields in use, each with its partners
//   s.emitted_logprobs(slots, K + 1);                 // [R][slot] {ids, values, rank}: column 0 the emitted token
//   s.emitted_kept_mask(kept, K + 1, V);              // [R][slot] the kept token ids, packed
//   s.draft_trees({{-1, -1, 0}, {}}, cu);              // draft trees: each node's parent; {} not a tree (verify_method
//                                                    // 3 / 0 and tree_parent, docs/FIXTURES.md "Draft trees")
// A step holding a minor-2 field makes the manifest say "schema_minor": 2 (rewritten when the first such step
// is written); a recording without one stays minor 0, as before.
//
// Without close() (a crash), the recording stays "complete": false and every finished step replays.
// The writer checks shapes loosely (bytes == product of the shape times the dtype width); run
// `replay validate DIR` on what you record, it checks every rule of docs/FIXTURES.md.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <algorithm>
#include <cstring>
#include <limits>
#include <map>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace replay {

// ---------------------------------------------------------------- SHA-256 (FIPS 180-4)
class Sha256 {
 public:
  Sha256() { reset(); }
  void reset() {
    static const uint32_t init[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                     0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    std::memcpy(h_, init, sizeof h_);
    len_ = 0;
    fill_ = 0;
  }
  void update(const void* data, size_t n) {
    const unsigned char* p = static_cast<const unsigned char*>(data);
    len_ += n;
    while (n > 0) {
      size_t take = 64 - fill_ < n ? 64 - fill_ : n;
      std::memcpy(buf_ + fill_, p, take);
      fill_ += take; p += take; n -= take;
      if (fill_ == 64) { block(buf_); fill_ = 0; }
    }
  }
  void update(const std::string& s) { update(s.data(), s.size()); }
  std::string hex() {  // finishes; call reset() to reuse
    uint64_t bits = len_ * 8;
    unsigned char pad = 0x80, zero = 0;
    update(&pad, 1);
    while (fill_ != 56) update(&zero, 1);
    unsigned char be[8];
    for (int i = 0; i < 8; ++i) be[i] = static_cast<unsigned char>(bits >> (56 - 8 * i));
    update(be, 8);
    static const char* digits = "0123456789abcdef";
    std::string out;
    for (uint32_t w : h_)
      for (int i = 28; i >= 0; i -= 4) out += digits[(w >> i) & 0xF];
    return out;
  }

 private:
  uint32_t h_[8];
  unsigned char buf_[64];
  uint64_t len_;
  size_t fill_;
  static uint32_t rotr(uint32_t x, int r) { return (x >> r) | (x << (32 - r)); }
  void block(const unsigned char* b) {
    static const uint32_t k[64] = {
        0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
        0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
        0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
        0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
        0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
        0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
        0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
        0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};
    uint32_t w[64];
    for (int i = 0; i < 16; ++i)
      w[i] = uint32_t(b[4 * i]) << 24 | uint32_t(b[4 * i + 1]) << 16 | uint32_t(b[4 * i + 2]) << 8 | b[4 * i + 3];
    for (int i = 16; i < 64; ++i) {
      uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
      uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
      w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    uint32_t a = h_[0], bb = h_[1], c = h_[2], d = h_[3], e = h_[4], f = h_[5], g = h_[6], h = h_[7];
    for (int i = 0; i < 64; ++i) {
      uint32_t t1 = h + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + k[i] + w[i];
      uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & bb) ^ (a & c) ^ (bb & c));
      h = g; g = f; f = e; e = d + t1; d = c; c = bb; bb = a; a = t1 + t2;
    }
    h_[0] += a; h_[1] += bb; h_[2] += c; h_[3] += d; h_[4] += e; h_[5] += f; h_[6] += g; h_[7] += h;
  }
};

// ---------------------------------------------------------------- one step's tensors
struct Tensor {
  std::string dtype;           // safetensors name: F32, BF16, F16, I32, I64, I8
  std::vector<int64_t> shape;
  std::vector<unsigned char> bytes;  // little-endian, row-major
};

// The digest's name for a safetensors dtype (docs/FIXTURES.md, "Content digest": torch's names).
inline const char* digest_dtype(const std::string& st) {
  if (st == "F32") return "float32";
  if (st == "BF16") return "bfloat16";
  if (st == "F16") return "float16";
  if (st == "I32") return "int32";
  if (st == "I64") return "int64";
  if (st == "I8") return "int8";
  throw std::invalid_argument("replay: unsupported dtype " + st);
}

// ---------------------------------------------------------------- schema minor 2: the sampling pipeline
// The names a step of schema minor 2 may hold beyond minor 0's (docs/FIXTURES.md, "The sampling pipeline",
// "Emitted logprobs and kept sets").
inline bool is_minor2_name(const std::string& n) {
  static const char* names[] = {
      "repetition_penalty", "frequency_penalty", "presence_penalty", "min_tokens", "has_grammar", "logprobs",
      "logprobs_mode", "prompt_token_ids", "cu_prompt_token_ids", "output_token_ids", "cu_output_token_ids",
      "allowed_token_ids", "cu_allowed_token_ids", "stop_token_ids", "cu_stop_token_ids", "bad_words_token_ids",
      "cu_bad_words_token_ids", "bad_words_lengths", "cu_bad_words_lengths", "logit_bias_ids", "logit_bias_values",
      "cu_logit_bias", "grammar_bitmask", "emitted_logprobs", "emitted_logprob_ids", "emitted_logprob_ranks",
      "emitted_kept_mask", "verify_method", "tree_parent"};
  for (const char* x : names)
    if (n == x) return true;
  return false;
}

// One request's pipeline inputs; every default is the rule's "off" value.
struct RequestPipeline {
  float repetition_penalty = 1.0f;  // > 0, finite; 1 off (needs the prompt and the output)
  float frequency_penalty = 0.0f;   // finite; 0 off
  float presence_penalty = 0.0f;    // finite; 0 off
  int32_t min_tokens = 0;           // >= 0: stop_token_ids are -inf while the output is shorter
  int32_t logprobs = -1;            // -1 none; n in [0, V]: the emitted token's logprob and the top n
  int8_t logprobs_mode = 0;         // 0 raw_logprobs, 1 processed_logprobs, 2 raw_logits, 3 processed_logits
  bool has_grammar = false;         // grammar_rows applies to the request's rows
  std::vector<int32_t> prompt_token_ids, output_token_ids;  // output: the tokens emitted so far (no drafts)
  std::vector<int32_t> allowed_token_ids;  // empty: no restriction
  std::vector<int32_t> stop_token_ids;     // the ids min_tokens holds back
  std::vector<std::vector<int32_t>> bad_words;            // each word a token sequence of length >= 1
  std::vector<std::pair<int32_t, float>> logit_bias;      // (token id, bias); one bias a token; -inf bans
  std::vector<std::vector<int32_t>> grammar_rows;         // has_grammar: the allowed ids of each of its 1 + k rows
};

// [W = ceil(V/32)] int32 words: bit id % 32 of word id // 32 set for each id (ids >= V allowed, ignored by readers).
inline std::vector<int32_t> pack_bits(const std::vector<int32_t>& ids, int64_t vocab_size) {
  std::vector<uint32_t> w(static_cast<size_t>((vocab_size + 31) / 32), 0u);
  for (int32_t id : ids) {
    if (id < 0 || id / 32 >= static_cast<int64_t>(w.size()))
      throw std::invalid_argument("replay: token id " + std::to_string(id) + " outside the bitmask's words");
    w[static_cast<size_t>(id / 32)] |= 1u << (id % 32);
  }
  std::vector<int32_t> out(w.size());
  std::memcpy(out.data(), w.data(), w.size() * sizeof(uint32_t));  // two's complement: bit 31 is the sign
  return out;
}

// One emitted slot's logprobs: ids[0] the emitted token, then the top n (descending); values alike; rank >= 1.
struct SlotLogprobs {
  std::vector<int32_t> ids;
  std::vector<float> values;
  int32_t rank = -1;
};

class Step {
 public:
  void f32(const std::string& n, std::vector<int64_t> s, const std::vector<float>& v) { put(n, "F32", s, v); }
  void bf16(const std::string& n, std::vector<int64_t> s, const std::vector<uint16_t>& v) { put(n, "BF16", s, v); }
  void f16(const std::string& n, std::vector<int64_t> s, const std::vector<uint16_t>& v) { put(n, "F16", s, v); }
  void i32(const std::string& n, std::vector<int64_t> s, const std::vector<int32_t>& v) { put(n, "I32", s, v); }
  void i64(const std::string& n, std::vector<int64_t> s, const std::vector<int64_t>& v) { put(n, "I64", s, v); }
  void i8(const std::string& n, std::vector<int64_t> s, const std::vector<int8_t>& v) { put(n, "I8", s, v); }
  const std::map<std::string, Tensor>& tensors() const { return tensors_; }  // name order (byte order)
  int minor() const {  // the schema minor the step needs: 2 with a field of the sampling pipeline, else 0
    for (const auto& kv : tensors_)
      if (is_minor2_name(kv.first)) return 2;
    return 0;
  }

  // A ragged list: values [*] (one list per request, concatenated) and its prefix sum cu_name [R+1].
  template <class T>
  void ragged(const std::string& name, const std::string& cu_name, const std::vector<std::vector<T>>& lists) {
    std::vector<T> flat;
    std::vector<int32_t> cu = {0};
    for (const auto& l : lists) {
      flat.insert(flat.end(), l.begin(), l.end());
      cu.push_back(static_cast<int32_t>(flat.size()));
    }
    put(name, dtype_of<T>(), {static_cast<int64_t>(flat.size())}, flat);
    put(cu_name, "I32", {static_cast<int64_t>(cu.size())}, cu);
  }

  // Every pipeline field some request uses (a value other than the default, a non-empty list), with the fields
  // it needs beside it (docs/FIXTURES.md, "Which fields go together"). cu: the step's cu_num_logits [R+1].
  void pipeline(const std::vector<RequestPipeline>& p, const std::vector<int32_t>& cu, int64_t vocab_size) {
    using RP = RequestPipeline;
    const int64_t r = static_cast<int64_t>(p.size());
    if (r == 0 || static_cast<int64_t>(cu.size()) != r + 1)
      throw std::invalid_argument("replay: pipeline() needs one RequestPipeline a request and cu_num_logits [R+1]");
    auto any = [&](auto pred) { return std::any_of(p.begin(), p.end(), pred); };
    auto column = [&](auto get) {  // one value (or list) a request
      std::vector<decltype(get(p[0]))> v;
      for (const auto& x : p) v.push_back(get(x));
      return v;
    };
    const bool rep = any([](const RP& x) { return x.repetition_penalty != 1.0f; });
    const bool freq = any([](const RP& x) { return x.frequency_penalty != 0.0f; });
    const bool pres = any([](const RP& x) { return x.presence_penalty != 0.0f; });
    const bool stops = any([](const RP& x) { return !x.stop_token_ids.empty(); });
    const bool min_t = stops || any([](const RP& x) { return x.min_tokens != 0; });
    const bool words = any([](const RP& x) { return !x.bad_words.empty(); });
    const bool prompt = rep || any([](const RP& x) { return !x.prompt_token_ids.empty(); });
    const bool output = rep || freq || pres || min_t || words ||
                        any([](const RP& x) { return !x.output_token_ids.empty(); });
    const std::vector<int64_t> rs = {r};
    if (rep) put("repetition_penalty", "F32", rs, column([](const RP& x) { return x.repetition_penalty; }));
    if (freq) put("frequency_penalty", "F32", rs, column([](const RP& x) { return x.frequency_penalty; }));
    if (pres) put("presence_penalty", "F32", rs, column([](const RP& x) { return x.presence_penalty; }));
    if (min_t) put("min_tokens", "I32", rs, column([](const RP& x) { return x.min_tokens; }));
    if (any([](const RP& x) { return x.logprobs >= 0; })) {
      put("logprobs", "I32", rs, column([](const RP& x) { return x.logprobs; }));
      put("logprobs_mode", "I8", rs, column([](const RP& x) { return x.logprobs_mode; }));
    }
    if (prompt)
      ragged("prompt_token_ids", "cu_prompt_token_ids", column([](const RP& x) { return x.prompt_token_ids; }));
    if (output)
      ragged("output_token_ids", "cu_output_token_ids", column([](const RP& x) { return x.output_token_ids; }));
    if (any([](const RP& x) { return !x.allowed_token_ids.empty(); }))
      ragged("allowed_token_ids", "cu_allowed_token_ids", column([](const RP& x) { return x.allowed_token_ids; }));
    if (stops) ragged("stop_token_ids", "cu_stop_token_ids", column([](const RP& x) { return x.stop_token_ids; }));
    if (words) {
      std::vector<std::vector<int32_t>> tokens(p.size()), lengths(p.size());
      for (size_t i = 0; i < p.size(); ++i)
        for (const auto& w : p[i].bad_words) {
          tokens[i].insert(tokens[i].end(), w.begin(), w.end());
          lengths[i].push_back(static_cast<int32_t>(w.size()));
        }
      ragged("bad_words_token_ids", "cu_bad_words_token_ids", tokens);
      ragged("bad_words_lengths", "cu_bad_words_lengths", lengths);
    }
    if (any([](const RP& x) { return !x.logit_bias.empty(); })) {
      std::vector<std::vector<int32_t>> ids(p.size());
      std::vector<float> values;
      for (size_t i = 0; i < p.size(); ++i)
        for (const auto& [id, b] : p[i].logit_bias) {
          ids[i].push_back(id);
          values.push_back(b);
        }
      ragged("logit_bias_ids", "cu_logit_bias", ids);
      put("logit_bias_values", "F32", {static_cast<int64_t>(values.size())}, values);
    }
    if (any([](const RP& x) { return x.has_grammar; })) {
      const int64_t w = (vocab_size + 31) / 32;
      std::vector<int32_t> bitmask;
      std::vector<int8_t> has;
      for (int64_t i = 0; i < r; ++i) {
        const int64_t rows = cu[i + 1] - cu[i];
        if (p[i].has_grammar && static_cast<int64_t>(p[i].grammar_rows.size()) != rows)
          throw std::invalid_argument("replay: request " + std::to_string(i) + " needs one grammar row a logits row");
        for (int64_t j = 0; j < rows; ++j) {
          const auto row = p[i].has_grammar ? pack_bits(p[i].grammar_rows[j], vocab_size) : std::vector<int32_t>(w, 0);
          bitmask.insert(bitmask.end(), row.begin(), row.end());
        }
        has.push_back(p[i].has_grammar ? 1 : 0);
      }
      put("has_grammar", "I8", rs, has);
      put("grammar_bitmask", "I32", {cu.back(), w}, bitmask);
    }
  }

  // Draft trees (docs/FIXTURES.md "Draft trees"): verify_method [R] (3 "tree" where trees[r] is set, else 0
  // "standard") and tree_parent [N]. trees[r]: request r's k_r node parents (node i described on row cu[r] + i: -1 the
  // root, else an earlier node); empty for a request that is not a tree (its parents are written as the chain i - 1;
  // a tree of no nodes is a plain sample, standard too). -1 on each bonus row. Positions are the caller's: node i at
  // the first node's position + depth - 1, the bonus row at that position + the tree's depth.
  void draft_trees(const std::vector<std::vector<int32_t>>& trees, const std::vector<int32_t>& cu) {
    const int64_t r = static_cast<int64_t>(trees.size());
    if (r == 0 || static_cast<int64_t>(cu.size()) != r + 1)
      throw std::invalid_argument("replay: draft_trees() needs one parent list a request and cu_num_logits [R+1]");
    std::vector<int8_t> method;
    std::vector<int32_t> parent;
    for (int64_t i = 0; i < r; ++i) {
      const int32_t k = cu[i + 1] - cu[i] - 1;
      const auto& t = trees[static_cast<size_t>(i)];
      if (!t.empty() && static_cast<int32_t>(t.size()) != k)
        throw std::invalid_argument("replay: draft_trees(): request " + std::to_string(i) + " has " +
                                    std::to_string(k) + " nodes (draft rows) but " + std::to_string(t.size()) +
                                    " parents");
      method.push_back(t.empty() ? 0 : 3);
      for (int32_t j = 0; j < k; ++j) parent.push_back(t.empty() ? j - 1 : t[static_cast<size_t>(j)]);
      parent.push_back(-1);
    }
    put("verify_method", "I8", {r}, method);
    put("tree_parent", "I32", {static_cast<int64_t>(parent.size())}, parent);
  }

  // emitted_logprobs / _ids [R, K+1, L] and emitted_logprob_ranks [R, K+1] from slots[r][i] (the emitted slots of
  // the requests that asked for logprobs; empty for the others): -inf / -1 / -1 where nothing was returned.
  // L = the longest ids list (1 + the largest n asked for).
  void emitted_logprobs(const std::vector<std::vector<SlotLogprobs>>& slots, int64_t k_plus_1) {
    int64_t l = 1;
    for (const auto& req : slots)
      for (const auto& s : req) l = std::max<int64_t>(l, static_cast<int64_t>(s.ids.size()));
    const int64_t r = static_cast<int64_t>(slots.size());
    std::vector<float> values(static_cast<size_t>(r * k_plus_1 * l), -std::numeric_limits<float>::infinity());
    std::vector<int32_t> ids(values.size(), -1), ranks(static_cast<size_t>(r * k_plus_1), -1);
    for (int64_t i = 0; i < r; ++i)
      for (int64_t j = 0; j < static_cast<int64_t>(slots[i].size()) && j < k_plus_1; ++j) {
        const SlotLogprobs& s = slots[i][j];
        if (s.values.size() != s.ids.size())
          throw std::invalid_argument("replay: a slot's ids and values differ in length");
        for (size_t c = 0; c < s.ids.size(); ++c) {
          ids[static_cast<size_t>((i * k_plus_1 + j) * l) + c] = s.ids[c];
          values[static_cast<size_t>((i * k_plus_1 + j) * l) + c] = s.values[c];
        }
        ranks[static_cast<size_t>(i * k_plus_1 + j)] = s.rank;
      }
    put("emitted_logprobs", "F32", {r, k_plus_1, l}, values);
    put("emitted_logprob_ids", "I32", {r, k_plus_1, l}, ids);
    put("emitted_logprob_ranks", "I32", {r, k_plus_1}, ranks);
  }

  // emitted_kept_mask [R, K+1, ceil(V/32)] from kept[r][i]: the ids kept with a finite processed logit at each
  // emitted slot (0 words for the slots not emitted).
  void emitted_kept_mask(const std::vector<std::vector<std::vector<int32_t>>>& kept, int64_t k_plus_1,
                         int64_t vocab_size) {
    const int64_t r = static_cast<int64_t>(kept.size()), w = (vocab_size + 31) / 32;
    std::vector<int32_t> words(static_cast<size_t>(r * k_plus_1 * w), 0);
    for (int64_t i = 0; i < r; ++i)
      for (int64_t j = 0; j < static_cast<int64_t>(kept[i].size()) && j < k_plus_1; ++j) {
        const auto row = pack_bits(kept[i][j], vocab_size);
        std::copy(row.begin(), row.end(), words.begin() + (i * k_plus_1 + j) * w);
      }
    put("emitted_kept_mask", "I32", {r, k_plus_1, w}, words);
  }

 private:
  std::map<std::string, Tensor> tensors_;
  template <class T>
  static const char* dtype_of() {
    if (std::is_same<T, float>::value) return "F32";
    if (std::is_same<T, int32_t>::value) return "I32";
    if (std::is_same<T, int64_t>::value) return "I64";
    if (std::is_same<T, int8_t>::value) return "I8";
    throw std::invalid_argument("replay: no dtype for this element type");
  }
  template <class T>
  void put(const std::string& name, const std::string& dtype, const std::vector<int64_t>& shape,
           const std::vector<T>& values) {
    static_assert(sizeof(T) <= 8, "scalar types only");
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    if (n != static_cast<int64_t>(values.size()))
      throw std::invalid_argument("replay: tensor '" + name + "' has " + std::to_string(values.size()) +
                                  " values for its shape");
    Tensor t{dtype, shape, std::vector<unsigned char>(values.size() * sizeof(T))};
    for (size_t i = 0; i < values.size(); ++i) {  // little-endian whatever the host
      uint64_t bits = 0;
      std::memcpy(&bits, &values[i], sizeof(T));
      for (size_t b = 0; b < sizeof(T); ++b) t.bytes[i * sizeof(T) + b] = static_cast<unsigned char>(bits >> (8 * b));
    }
    tensors_[name] = std::move(t);
  }
};

// ---------------------------------------------------------------- the writer
inline std::string shape_json(const std::vector<int64_t>& s, const char* sep) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? sep : "") + std::to_string(s[i]);
  return out + "]";
}

class RecordingWriter {
 public:
  // source_json: a JSON object (provenance: engine, model, ...), written as is.
  RecordingWriter(std::string dir, int64_t vocab_size, std::string source_json = "{}", bool synthetic = false,
                  std::string rng_contract = "mrv2")
      : dir_(std::move(dir)), vocab_(vocab_size), source_(std::move(source_json)), synthetic_(synthetic),
        rng_(std::move(rng_contract)) {
    make_dir(dir_);
    make_dir(dir_ + "/steps");
    write_manifest(false);
  }

  // Writes step number num_steps() (temp name, fsync, rename); returns its content digest.
  std::string write_step(const Step& step) {
    const int64_t index = static_cast<int64_t>(digests_.size());
    if (step.minor() > minor_) {  // the first step of the sampling pipeline: the manifest says minor 2 from now on
      minor_ = step.minor();
      write_manifest(false);
    }
    const std::string meta = "{\"schema\":\"replay.step/1\",\"step\":" + std::to_string(index) + "}";
    std::string header = "{";
    uint64_t offset = 0;
    Sha256 sha;
    for (const auto& [name, t] : step.tensors()) {
      header += "\"" + name + "\":{\"dtype\":\"" + t.dtype + "\",\"shape\":" + shape_json(t.shape, ",") +
                ",\"data_offsets\":[" + std::to_string(offset) + "," + std::to_string(offset + t.bytes.size()) + "]},";
      offset += t.bytes.size();
      sha.update(name + "|" + digest_dtype(t.dtype) + "|" + shape_json(t.shape, ", ") + "|");
      sha.update(t.bytes.data(), t.bytes.size());
    }
    header += "\"__metadata__\":{\"replay\":\"" + escape(meta) + "\"}}";
    while (header.size() % 8) header += ' ';
    sha.update(meta);
    std::string file;
    for (int b = 0; b < 8; ++b) file += static_cast<char>((uint64_t(header.size()) >> (8 * b)) & 0xFF);
    file += header;
    for (const auto& kv : step.tensors()) file.append(kv.second.bytes.begin(), kv.second.bytes.end());
    char name[64];
    std::snprintf(name, sizeof name, "step-%06lld.safetensors", static_cast<long long>(index));
    atomic_write(dir_ + "/steps", name, file);
    digests_.push_back(sha.hex());
    return digests_.back();
  }

  void close() { write_manifest(true); }
  int64_t num_steps() const { return static_cast<int64_t>(digests_.size()); }
  std::string digest() const {  // sha256 of the step digests' hex strings, concatenated
    Sha256 sha;
    for (const auto& d : digests_) sha.update(d);
    return sha.hex();
  }

 private:
  std::string dir_;
  int64_t vocab_;
  std::string source_;
  bool synthetic_;
  std::string rng_;
  std::vector<std::string> digests_;
  int minor_ = 0;  // schema_minor: 0, or 2 once a step held a field of the sampling pipeline

  static std::string escape(const std::string& s) {
    std::string out;
    for (char c : s) {
      if (c == '"' || c == '\\') out += '\\';
      out += c;
    }
    return out;
  }
  static void make_dir(const std::string& d) {
    if (::mkdir(d.c_str(), 0777) != 0 && errno != EEXIST)
      throw std::runtime_error("replay: cannot create " + d + ": " + std::strerror(errno));
  }
  static void atomic_write(const std::string& dir, const std::string& name, const std::string& data) {
    const std::string tmp = dir + "/." + name + ".tmp", final_path = dir + "/" + name;
    int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0666);
    if (fd < 0) throw std::runtime_error("replay: cannot write " + tmp + ": " + std::strerror(errno));
    size_t done = 0;
    while (done < data.size()) {
      ssize_t n = ::write(fd, data.data() + done, data.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) { ::close(fd); throw std::runtime_error("replay: write failed: " + std::string(std::strerror(errno))); }
      done += static_cast<size_t>(n);
    }
    if (::fsync(fd) != 0 || ::close(fd) != 0) throw std::runtime_error("replay: fsync failed for " + tmp);
    if (std::rename(tmp.c_str(), final_path.c_str()) != 0)
      throw std::runtime_error("replay: cannot rename " + tmp + ": " + std::strerror(errno));
    int dfd = ::open(dir.c_str(), O_RDONLY);
    if (dfd >= 0) { ::fsync(dfd); ::close(dfd); }
  }
  void write_manifest(bool complete) {
    std::string m = "{\n  \"schema\": \"replay.recording/1\",\n  \"schema_minor\": " + std::to_string(minor_) +
                    ",\n  \"vocab_size\": " +
                    std::to_string(vocab_) + ",\n  \"rng_contract\": \"" + escape(rng_) + "\",\n  \"synthetic\": " +
                    (synthetic_ ? "true" : "false") + ",\n  \"source\": " + source_ + ",\n  \"complete\": " +
                    (complete ? "true" : "false") + ",\n  \"num_steps\": " + std::to_string(num_steps()) +
                    ",\n  \"digest\": " + (complete ? "\"" + digest() + "\"" : std::string("null")) + "\n}\n";
    atomic_write(dir_, "manifest.json", m);
  }
};

}  // namespace replay
