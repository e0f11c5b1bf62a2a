// Writes the worked example of docs/FIXTURES.md "The sampling pipeline" (schema minor 2) with
// replay_recorder.hpp: one step, two requests, V = 8, every field of the sampling pipeline and the emitted
// logprobs and kept sets. SYNTHETIC: hand-made logits, the tokens and logprobs the page derives step by step.
//
// Build:  g++ -O1 -std=c++17 -ffp-contract=off -o pipeline_step examples/cpp_recorder/pipeline_step.cpp
// Run:    ./pipeline_step OUT_DIR
// Check:  replay validate OUT_DIR && replay run OUT_DIR --impl reference     (exit 0 both)
//
//   request 17: temperature 0, one draft (6), prompt [1, 2], output so far [5, 3], repetition 1.5, frequency 0.5,
//               presence 0.25, logit bias {6: +1.25}, bad words [3, 7] and [6, 7], processed logprobs (top 2)
//   request 18: temperature 0.5, seed 7, a grammar row allowing {0, 2, 3, 6}, allowed ids [0, 2, 5, 6],
//               min_tokens 3 with stop id 2 and output so far [1], raw logprobs (top 2)
#include <cstdint>
#include <iostream>
#include <vector>

#include "replay_recorder.hpp"

int main(int argc, char** argv) {
  if (argc < 2) { std::cerr << "usage: pipeline_step OUT_DIR\n"; return 2; }
  constexpr int64_t V = 8, R = 2, N = 3, K = 1;
  replay::RecordingWriter rec(argv[1], V, R"({"engine": "cpp_recorder pipeline example", "model": "none"})",
                              /*synthetic=*/true);
  const std::vector<int32_t> cu = {0, 2, 3};
  replay::Step st;
  st.f32("logits", {N, V}, {0.5f, 1.0f, 2.0f, 3.75f, 2.5f, -1.0f, 1.5f, 0.0f,     // row 0: 17 verifies draft 6
                            1.0f, 0.5f, -0.5f, 2.0f, 1.875f, 0.0f, 2.5f, 3.5f,     // row 1: 17's bonus row
                            2.0f, -1.0f, 3.0f, 1.0f, 0.5f, 2.5f, 1.5f, -0.5f});  // row 2: 18's only row
  st.i32("cu_num_logits", {R + 1}, cu);
  st.i32("draft_token_ids", {N}, {6, -1, -1});
  st.i64("positions", {N}, {12, 13, 4});
  st.f32("temperature", {R}, {0.0f, 0.5f});
  st.i32("top_k", {R}, {0, 0});
  st.f32("top_p", {R}, {1.0f, 1.0f});
  st.f32("min_p", {R}, {0.0f, 0.0f});
  st.i64("seed", {R}, {1234, 7});
  st.i64("request_ids", {R}, {17, 18});

  std::vector<replay::RequestPipeline> p(R);
  p[0].repetition_penalty = 1.5f;
  p[0].frequency_penalty = 0.5f;
  p[0].presence_penalty = 0.25f;
  p[0].prompt_token_ids = {1, 2};
  p[0].output_token_ids = {5, 3};
  p[0].logit_bias = {{6, 1.25f}};
  p[0].bad_words = {{3, 7}, {6, 7}};  // [6, 7] is completed by the draft 6 at row 1
  p[0].logprobs = 2;
  p[0].logprobs_mode = 1;  // processed_logprobs
  p[1].prompt_token_ids = {4, 4};
  p[1].output_token_ids = {1};
  p[1].allowed_token_ids = {0, 2, 5, 6};
  p[1].min_tokens = 3;
  p[1].stop_token_ids = {2};
  p[1].has_grammar = true;
  p[1].grammar_rows = {{0, 2, 3, 6}};  // word 77 = 0b1001101
  p[1].logprobs = 2;
  p[1].logprobs_mode = 0;  // raw_logprobs
  st.pipeline(p, cu, V);

  // What the engine emitted (docs/FIXTURES.md, the worked example of "The sampling pipeline").
  st.i32("emitted_tokens", {R, K + 1}, {6, 4, 0, -1});
  st.i32("emitted_counts", {R}, {2, 1});
  st.i8("emitted_routes", {R}, {2, 1});  // greedy-verify, random-sample
  st.emitted_logprobs({{{{6, 6, 4}, {-0.965405941f, -0.965405941f, -1.21540594f}, 1},
                        {{4, 4, 6}, {-1.07605124f, -1.07605124f, -1.20105124f}, 1}},
                       {{{0, 2, 0}, {-1.5460062f, -0.546006203f, -1.5460062f}, 2}}},
                      K + 1);
  st.emitted_kept_mask({{{0, 1, 2, 3, 4, 5, 6}, {0, 1, 2, 3, 4, 5, 6}}, {{0, 6}}}, K + 1, V);
  std::cout << "step 0 digest " << rec.write_step(st) << "\n";
  rec.close();
  std::cout << "recording digest " << rec.digest() << "\n";
  return 0;
}
