// An example C++ engine loop that records its decode steps with replay_recorder.hpp.
//
// Build:  g++ -O1 -std=c++17 -ffp-contract=off -o engine examples/cpp_recorder/engine.cpp
// Run:    ./engine OUT_DIR [STEPS]            (writes a recording; default 6 steps)
// Check:  replay validate OUT_DIR && replay run OUT_DIR --impl reference     (exit 0 both)
//
// The "model" is a deterministic toy (logits from a hash of the previous token and the position);
// the sampler is the example sampler's logic (examples/cpp_sampler/sampler.cpp: argmax with first-index
// ties and Gumbel-max with the mrv2 noise), included below rather than copied. Three requests per step:
//   request 10: temperature 0 with 2 drafts (greedy verify: accept while the draft is the argmax)
//   request 11: temperature 0.8, seed -7             (random-sample)
//   request 12: temperature 1.0, seed 2^40 + 3       (random-sample)
#include <cmath>
#include <cstdint>
#include <iostream>
#include <string>
#include <vector>

#include "replay_recorder.hpp"

#define main replay_example_sampler_main  // reuse the sampler's functions, not its main()
#include "../cpp_sampler/sampler.cpp"
#undef main

namespace {

constexpr int64_t V = 64;

// Toy model: one logits row for the token after `prev` at position `pos`.
std::vector<float> model_row(int64_t prev, int64_t pos) {
  std::vector<float> row(V);
  for (int64_t v = 0; v < V; ++v) {
    uint32_t h = murmur_fmix(static_cast<uint32_t>(prev * 7919 + pos * 104729 + v * 31 + 1));
    row[v] = static_cast<float>(h % 2000) / 250.0f - 4.0f;  // [-4, 4), multiples of 1/250
  }
  return row;
}

struct Request {
  int64_t id, pos, last;  // pos: position of the next token; last: the previous token
  float temperature;
  int64_t seed, drafts;
};

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) { std::cerr << "usage: engine OUT_DIR [STEPS]\n"; return 2; }
  const int steps = argc > 2 ? std::stoi(argv[2]) : 6;
  std::vector<Request> reqs = {{10, 5, 1, 0.0f, 0, 2}, {11, 3, 2, 0.8f, -7, 0},
                               {12, 9, 3, 1.0f, (int64_t(1) << 40) + 3, 0}};
  replay::RecordingWriter rec(argv[1], V, R"({"engine": "cpp_recorder example", "model": "toy hash model"})",
                              /*synthetic=*/true);
  for (int s = 0; s < steps; ++s) {
    std::vector<float> logits;
    std::vector<int32_t> cu = {0}, draft_ids, top_k, emitted, counts;
    std::vector<int64_t> positions, seeds, ids;
    std::vector<float> temps, top_p, min_p;
    std::vector<int8_t> routes;
    int64_t K = 0;
    for (const auto& r : reqs) K = std::max(K, r.drafts);
    for (auto& r : reqs) {
      // Drafter (toy): the first draft is the target's argmax, the second a guess that is usually wrong.
      std::vector<int64_t> drafts, out;
      int64_t prev = r.last;
      std::vector<std::vector<float>> rows;
      for (int64_t i = 0; i <= r.drafts; ++i) {
        rows.push_back(model_row(prev, r.pos + i));
        if (i < r.drafts) {
          int64_t d = i == 0 ? argmax_first(rows.back().data(), V) : (prev * 5 + 3) % V;
          drafts.push_back(d);
          prev = d;
        }
      }
      // Sample: greedy verify (argmax walk) or Gumbel-max over logits / temperature.
      if (r.temperature == 0.0f) {
        bool all = true;
        for (int64_t i = 0; i < r.drafts && all; ++i) {
          out.push_back(argmax_first(rows[i].data(), V));
          all = out.back() == drafts[i];
        }
        if (all) out.push_back(argmax_first(rows[r.drafts].data(), V));
      } else {
        std::vector<float> scores(V);
        for (int64_t v = 0; v < V; ++v)
          scores[v] = (r.temperature == 1.0f ? rows[0][v] : rows[0][v] / r.temperature) +
                      gumbel_noise(r.seed, r.pos, static_cast<uint32_t>(v));
        out.push_back(argmax_first(scores.data(), V));
      }
      // Record the step's inputs and what was emitted.
      for (int64_t i = 0; i <= r.drafts; ++i) {
        logits.insert(logits.end(), rows[i].begin(), rows[i].end());
        draft_ids.push_back(i < r.drafts ? static_cast<int32_t>(drafts[i]) : -1);
        positions.push_back(r.pos + i);
      }
      cu.push_back(cu.back() + static_cast<int32_t>(r.drafts + 1));
      temps.push_back(r.temperature); top_k.push_back(0); top_p.push_back(1.0f); min_p.push_back(0.0f);
      seeds.push_back(r.seed); ids.push_back(r.id);
      for (int64_t j = 0; j <= K; ++j) emitted.push_back(j < int64_t(out.size()) ? static_cast<int32_t>(out[j]) : -1);
      counts.push_back(static_cast<int32_t>(out.size()));
      routes.push_back(static_cast<int8_t>(r.drafts > 0 ? (r.temperature == 0.0f ? 2 : 3) : (r.temperature == 0.0f ? 0 : 1)));
      r.pos += static_cast<int64_t>(out.size());
      r.last = out.back();
    }
    const int64_t N = static_cast<int64_t>(positions.size()), R = static_cast<int64_t>(reqs.size());
    replay::Step st;
    st.f32("logits", {N, V}, logits);
    st.i32("cu_num_logits", {R + 1}, cu);
    st.i32("draft_token_ids", {N}, draft_ids);
    st.i64("positions", {N}, positions);
    st.f32("temperature", {R}, temps);
    st.i32("top_k", {R}, top_k);
    st.f32("top_p", {R}, top_p);
    st.f32("min_p", {R}, min_p);
    st.i64("seed", {R}, seeds);
    st.i64("request_ids", {R}, ids);
    st.i32("emitted_tokens", {R, K + 1}, emitted);
    st.i32("emitted_counts", {R}, counts);
    st.i8("emitted_routes", {R}, routes);
    std::cout << "step " << s << " digest " << rec.write_step(st) << "\n";
  }
  rec.close();
  std::cout << "recording digest " << rec.digest() << "\n";
  return 0;
}
