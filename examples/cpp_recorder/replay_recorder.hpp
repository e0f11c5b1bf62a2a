// replay_recorder.hpp: a single-header, dependency-free C++17 writer of the replay fixture format
// (docs/FIXTURES.md: `replay.recording/1`, `replay.step/1`). POSIX only (open/fsync/rename).
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
#include <cstring>
#include <map>
#include <stdexcept>
#include <string>
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

class Step {
 public:
  void f32(const std::string& n, std::vector<int64_t> s, const std::vector<float>& v) { put(n, "F32", s, v); }
  void bf16(const std::string& n, std::vector<int64_t> s, const std::vector<uint16_t>& v) { put(n, "BF16", s, v); }
  void f16(const std::string& n, std::vector<int64_t> s, const std::vector<uint16_t>& v) { put(n, "F16", s, v); }
  void i32(const std::string& n, std::vector<int64_t> s, const std::vector<int32_t>& v) { put(n, "I32", s, v); }
  void i64(const std::string& n, std::vector<int64_t> s, const std::vector<int64_t>& v) { put(n, "I64", s, v); }
  void i8(const std::string& n, std::vector<int64_t> s, const std::vector<int8_t>& v) { put(n, "I8", s, v); }
  const std::map<std::string, Tensor>& tensors() const { return tensors_; }  // name order (byte order)

 private:
  std::map<std::string, Tensor> tensors_;
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
    std::string m = "{\n  \"schema\": \"replay.recording/1\",\n  \"schema_minor\": 0,\n  \"vocab_size\": " +
                    std::to_string(vocab_) + ",\n  \"rng_contract\": \"" + escape(rng_) + "\",\n  \"synthetic\": " +
                    (synthetic_ ? "true" : "false") + ",\n  \"source\": " + source_ + ",\n  \"complete\": " +
                    (complete ? "true" : "false") + ",\n  \"num_steps\": " + std::to_string(num_steps()) +
                    ",\n  \"digest\": " + (complete ? "\"" + digest() + "\"" : std::string("null")) + "\n}\n";
    atomic_write(dir_, "manifest.json", m);
  }
};

}  // namespace replay
